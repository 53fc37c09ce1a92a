"""bench/vs_trl.py's shared evaluator: every saved policy of both sides (and the base
model) greedily on the same held-out tasks, one vLLM engine loading each in turn, rewards
from the score stage's `verify`; each point keeps every task's reward for the paired
intervals of the report."""

from __future__ import annotations

import time


def run_eval(bench, cfg, points: list[dict]) -> list[dict]:
    """Greedy held-out reward of every point (the base model first) with one vLLM engine
    that loads each saved policy in turn; rewards from the score stage's `verify`. `cfg`:
    the FlywheelConfig both sides trained with (bench/vs_trl.py's `flywheel_config`)."""
    from transformers import AutoTokenizer

    from flywheel.environments.registry import Domains
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.flows.evaluate import eval_tasks
    from flywheel.run.model_prep import resolve_model
    from flywheel.policy.chat import encode_chat
    from flywheel.policy.engines import SamplingSpec, make_engine
    from flywheel.policy.grpo import overlong_penalty
    from flywheel.tasks.score import verify

    model_dir = resolve_model(cfg.model.path, cfg.model.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    domains = Domains(cfg.sampler.domains)
    tasks = eval_tasks(domains, cfg.sampler, bench.eval_per_level)
    prompts = [encode_chat(tokenizer, t.prompt) for t in tasks]
    budget = cfg.engine.max_model_len - cfg.generation.max_tokens
    if any(len(p) > budget for p in prompts):
        raise ValueError(f"an eval prompt is longer than max_model_len - max_tokens ({budget})")
    envs = {d: domains[d] for d in cfg.sampler.domains}
    max_tokens, buffer = cfg.generation.max_tokens, cfg.reward.overlong_buffer
    spec = SamplingSpec(n=1, temperature=0.0, max_tokens=max_tokens)
    engine = make_engine(model_dir, cfg.engine, cfg.seed)
    sandbox = make_sandbox(cfg.sandbox)
    results, probe = [], None
    try:
        for point in [{"side": "base", "label": "base", "t": 0.0, "dir": model_dir}, *points]:
            t_start = time.time()
            engine.load_weights(point["dir"])
            samples = [group[0] for group in engine.generate(prompts, spec)]
            # A fixed sequence (the first prompt, the base model's answer) scored under each
            # policy: a policy that scores it exactly as the base did was not loaded.
            probe = probe or (prompts[0] + samples[0].token_ids, len(prompts[0]))
            probe_logprob = round(sum(engine.prompt_logprobs([probe[0]], [probe[1]])[0]), 6)
            if results and probe_logprob == results[0]["probe_logprob"]:
                print(f"WARNING: {point['side']} {point['label']} scores the probe exactly as the base model")
            verified = verify(sandbox, [(envs[t.domain], t, s.text) for t, s in zip(tasks, samples)])
            penalties = [overlong_penalty(len(s.token_ids), max_tokens, buffer) for s in samples]
            rewards = [v.score.reward + penalty for v, penalty in zip(verified, penalties)]
            by_domain = {d: _mean(r for r, t in zip(rewards, tasks) if t.domain == d) for d in envs}
            row = {k: v for k, v in point.items() if k != "dir"}
            row.update(reward=_mean(rewards), pass_rate=_mean(v.score.verdict == "pass" for v in verified),
                       rewards=[round(r, 4) for r in rewards], reward_by_domain=by_domain, eval_tasks=len(tasks),
                       probe_logprob=probe_logprob, eval_s=round(time.time() - t_start, 1))  # fmt: skip
            results.append(row)
            print(f"eval {point['side']:>8} {point['label']:>9} t={point['t'] / 60:6.1f} min  "
                  f"reward {row['reward']:.3f}", flush=True)  # fmt: skip
    finally:
        engine.close()
        sandbox.close()
    return results


def _mean(xs) -> float:
    xs = list(xs)
    return round(sum(xs) / len(xs), 4) if xs else float("nan")
