"""Long horizons: a cycle's generate and update at 4, 16 and 64 turns, whole history against a window.

    .venv/bin/python bench/long_horizon.py [MODEL_DIR] [--turns 4 16 64] [--tasks 2] [--k 2]
        [--max-tokens 32] [--max-model-len 4096] [--arms none window] [--zero-stage 0]

For each turn count N, `tasks` `longhorizon` tasks of the level whose chain is N steps long
(level 1: 4, 2: 16, 3: 64), k episodes each, capped at N turns, are played by the generate
stage's own code (`flywheel.tasks.generate.play_episodes`: the episode runner, the
flywheel's vLLM engine with continuous turns, the bwrap pool with one workspace per
episode), then the update stage's batch is built from them (`build_batch`: one sample per
episode, or per turn where the history was edited) and the trainer takes one GRPO step on
it (DeepSpeed on CPU at the run's default ZeRO stage, 3, or `--zero-stage 0`: the same
engine unsharded, `trainer.zero_stage`). Three arms per N:
  none         the whole history each turn (the runner before issue 46), one sample per episode;
  window       the domain's own policy (the last 6 to 8 turns, moved 3 at a time:
               environments/domains/longhorizon.py), trained step by step;
  window-by-1  the last 6 turns exactly, moved every turn: no prompt goes on from the one
               before, so the engine's prefix cache keeps only the opening.
Reported per arm: the model's sampled tokens per second of the stage and the engine's slot
utilisation (tasks/generate.py `generation_stats`, the cycle summary's figures), the
longest prompt the engine was given, the episodes that ran out of context, the train
samples and their tokens, the update's peak resident set (its `peak_rss_gib` metric, the
step's VmHWM), and the seconds of generate, update and both (the cycle less
sample, score, archive and replay, which take well under a second here). The base model
rarely finishes a chain, so episodes run to their N turns: the point is the cost of N
turns, not the reward. Every group's rewards are equal, so the update's advantages are 0;
the step costs the same (`drop_zero_variance_groups` is off here).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import flywheel  # noqa: E402

flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them

LEVEL = {4: 1, 16: 2, 64: 3}


class Parts:
    """What the generate stage's body reads (tasks/context.py), built here without a run."""

    def __init__(self, engine, tokenizer, domains, sandbox):
        self.engine, self.tokenizer, self.domains, self.sandbox = engine, tokenizer, domains, sandbox
        self.reward_functions, self.judge = [], None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--turns", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per turn")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--arms", nargs="+", default=["none", "window", "window-by-1"])
    ap.add_argument("--zero-stage", type=int, choices=[0, 3], default=None, help="trainer.zero_stage")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from flywheel.config import FlywheelConfig
    from flywheel.config.long_horizon import ContextConfig

    arms = {"none": ContextConfig(mode="none"), "window": ContextConfig(mode="domain"),
            "window-by-1": ContextConfig(mode="window", window_turns=6, window_slide=1)}  # fmt: skip
    from flywheel.environments.registry import Domains
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.policy.engines.vllm_engine import VLLMEngine
    from flywheel.policy.trainer import GRPOTrainer
    from flywheel.run.model_prep import resolve_model
    from flywheel.storage.schema import TRAJECTORY_SCHEMA, to_table
    from flywheel.tasks import generate as stage
    from flywheel.tasks.context import StageContext
    from flywheel.tasks.records import trajectory_record
    from flywheel.tasks.update import build_batch

    episodes = args.tasks * args.k
    config = FlywheelConfig(
        run_id="bench", engine={"max_model_len": args.max_model_len},
        generation={"k": args.k, "max_tokens": args.max_tokens}, sandbox={"concurrency": episodes},
        trainer={"drop_zero_variance_groups": False, "zero_stage": args.zero_stage},
    )  # fmt: skip
    model = resolve_model(args.model or config.model.path, config.model.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    domains = Domains(["longhorizon"])
    env = domains["longhorizon"]
    engine = VLLMEngine(model, config.engine, config.seed)
    sandbox = make_sandbox(config.sandbox)
    sandbox.warm()
    trainer = GRPOTrainer(model, config.trainer)
    parts = Parts(engine, tokenizer, domains, sandbox)
    print(f"{model}: {args.tasks} tasks x k={args.k}, {args.max_tokens} tokens a turn, context {args.max_model_len}, "
          f"{episodes} workspaces, {config.engine.dtype}, ZeRO stage {trainer.stage}")  # fmt: skip

    def cycle(turns: int, arm: str) -> dict:
        generation = config.generation.model_copy(update={"max_turns": turns, "context": arms[arm]})
        cfg = config.model_copy(update={"generation": generation})
        ctx = StageContext(config=cfg, run_id="bench", cycle=0, label="train", policy_version=0, policy_lag=0,
                           generation=generation)  # fmt: skip
        tasks = env.make_tasks("train", LEVEL[turns], turns, args.tasks)
        t0 = time.perf_counter()
        rollouts = stage.play_episodes(parts, ctx, tasks, stage.sampling_spec(ctx))
        gen_s = time.perf_counter() - t0
        stats = stage.generation_stats(rollouts)
        rows = [trajectory_record(ctx, r, r.episode_score) for r in rollouts]
        samples, _ = build_batch(
            to_table(rows, TRAJECTORY_SCHEMA), drop_zero_variance=False, trainer_version=0
        )
        t0 = time.perf_counter()
        metrics = trainer.step(samples)
        upd_s = time.perf_counter() - t0
        prompts = [len(t["prompt_token_ids"]) for r in rollouts for t in (r.turns or [])]
        prompts += [len(r.prompt_token_ids) + len(r.completion_token_ids) for r in rollouts if not r.turns]
        return {
            "turns": turns, "arm": arm, "episode_turns": sum(r.num_turns for r in rollouts),
            "out_of_context": sum(r.finish_reason == "max_tokens" for r in rollouts),
            "tokens_per_s": stats["episode_tokens_per_s"], "slot_utilisation": stats["slot_utilisation"],
            "longest_prompt": max(prompts), "train_samples": len(samples),
            "train_tokens": sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples),
            "sampled": sum(1 for r in rollouts for lp in r.completion_logprobs if not math.isnan(lp)),
            "generate_s": round(gen_s, 1), "update_s": round(upd_s, 1), "cycle_s": round(gen_s + upd_s, 1),
            "update_peak_gib": metrics.get("peak_rss_gib"),
        }  # fmt: skip

    cycle(4, args.arms[0])  # warm-up at the shortest chains: first requests, first step
    results = []
    try:
        for turns in args.turns:
            for arm in args.arms:
                r = cycle(turns, arm)
                results.append(r)
                print(json.dumps(r), flush=True)
    finally:
        sandbox.close()
        engine.close()
    print("\n| turns | context | turns played | out of context | tok/s | slots busy | longest prompt | train samples "
          "(tokens) | generate s | update s | update peak GiB | cycle s |\n|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for r in results:
        print(f"| {r['turns']} | {r['arm']} | {r['episode_turns']} | {r['out_of_context']} | {r['tokens_per_s']:.1f} | "
              f"{100 * r['slot_utilisation']:.0f}% | {r['longest_prompt']} | {r['train_samples']} "
              f"({r['train_tokens']}) | {r['generate_s']} | {r['update_s']} | {r['update_peak_gib']} | {r['cycle_s']} |")  # fmt: skip


if __name__ == "__main__":
    main()
