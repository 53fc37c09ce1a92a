"""Stage 2, generate: k samples per task from the engine, as Trajectory records.

Single-turn domains (the answer is the whole action): one engine call per batch of
prompts; the records leave here `pending` and the score stage verifies them. Prompts are
cut into a few batches only so that progress can be shown; vLLM batches within each call.

Multi-turn domains (environments/agentic.py): the episode runner (policy/multiturn.py)
plays each trajectory turn by turn in its own sandbox workspace, batching every turn's
generation across live trajectories, and the domain scores the final workspace before
it is released, so these records leave here already scored.

Records come out grouped by task in the order of the task list, so a list cut into
shards (flywheel/fanout.py) and joined back gives the same trajectory ids, groups and
order as the whole list. Not the same sampled text: the engine's random stream is seeded
per engine call, and shards make different calls.
"""

from __future__ import annotations

import dataclasses
import json
import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from environments import get_environment
from environments.agentic import MultiTurnEnvironment, RewardWeights
from flywheel.config import SamplingConfig
from flywheel.progress import stage
from policy.chat import encode_chat
from policy.engines import SamplingSpec
from policy.multiturn import run_episodes
from storage.schema import TaskSpec, Trajectory, stable_id


def pending_trajectory(rt, cycle, label, task_spec, prompt_ids, index, sample, gen_s) -> Trajectory:
    return Trajectory(
        trajectory_id=Trajectory.make_id(f"{rt.run_id}/{label}", cycle, task_spec.task_id, index),
        run_id=rt.run_id, cycle=cycle, policy_version=rt.engine_version, policy_lag=rt.policy_lag,
        task_id=task_spec.task_id, domain=task_spec.domain, level=task_spec.level,
        split=task_spec.split, origin=task_spec.origin, replay_count=task_spec.replay_count,
        origin_cycle=task_spec.origin_cycle,
        group_id=stable_id(rt.run_id, label, cycle, task_spec.task_id), sample_index=index,
        messages=[*task_spec.prompt, {"role": "assistant", "content": sample.text}],
        steps=[], prompt_token_ids=prompt_ids, completion_token_ids=sample.token_ids,
        completion_logprobs=sample.logprobs, finish_reason=sample.finish_reason,
        num_turns=1, num_tool_calls=0, reward=0.0, reward_outcome=0.0, reward_process=0.0,
        reward_penalty=0.0, verdict="pending", error="", tests_passed=0, tests_total=0,
        sandbox_backend=rt.config.sandbox.backend, verifier_version="",
        timings_json=json.dumps({"generate_s": gen_s}),
    )  # fmt: skip


def episode_trajectory(rt, cycle, label, ep, gen_s) -> Trajectory:
    task_spec = ep.task
    return Trajectory(
        trajectory_id=Trajectory.make_id(f"{rt.run_id}/{label}", cycle, task_spec.task_id, ep.sample_index),
        run_id=rt.run_id, cycle=cycle, policy_version=rt.engine_version, policy_lag=rt.policy_lag,
        task_id=task_spec.task_id, domain=task_spec.domain, level=task_spec.level,
        split=task_spec.split, origin=task_spec.origin, replay_count=task_spec.replay_count,
        origin_cycle=task_spec.origin_cycle, group_id=stable_id(rt.run_id, label, cycle, task_spec.task_id),
        sample_index=ep.sample_index, sandbox_backend=rt.config.sandbox.backend,
        verifier_version=f"{ep.env.name}-{ep.env.version}", timings_json=json.dumps({"episode_s": gen_s}),
        **ep.trajectory_fields(),
    )  # fmt: skip


def is_multi_turn(domain: str) -> bool:
    return isinstance(get_environment(domain), MultiTurnEnvironment)


def play_episodes(rt, tasks: list[TaskSpec], cycle: int, sampling: SamplingConfig, spec: SamplingSpec, label: str):
    """Multi-turn tasks: k scored episodes each. Tasks go to the runner a wave at a time
    (as many trajectories as the sandbox pool has workspaces), so progress shows."""
    out: list[Trajectory] = []
    per_wave = max(1, getattr(rt.sandbox, "concurrency", 4) // spec.n)
    r = rt.config.reward
    weights = RewardWeights(r.outcome_weight, r.valid_weight, r.progress_weight, r.recovery_weight)
    envs = {d: get_environment(d) for d in {t.domain for t in tasks}}
    for env in envs.values():
        env.weights = weights
    with stage("episodes", total=len(tasks) * spec.n) as advance:
        for start in range(0, len(tasks), per_wave):
            wave = tasks[start : start + per_wave]
            t0 = time.monotonic()
            groups = run_episodes(
                rt.engine, rt.tokenizer, rt.sandbox, [(t, envs[t.domain], spec.n) for t in wave],
                max_turns=sampling.max_turns, max_tokens=rt.config.engine.max_model_len,
                sampling=dataclasses.replace(spec, n=1),
            )  # fmt: skip
            per_episode = (time.monotonic() - t0) / max(1, len(wave) * spec.n)
            out += [episode_trajectory(rt, cycle, label, ep, per_episode) for group in groups for ep in group]
            advance(len(wave) * spec.n)
    return out


@task(name="generate", cache_policy=NO_CACHE)
def generate(
    rt, tasks: list[TaskSpec], cycle: int, sampling: SamplingConfig | None = None, label: str = "train"
) -> list[Trajectory]:
    """`sampling` overrides the config's (evaluation samples greedily); `label` keeps the
    ids of differently sampled trajectories of the same task and cycle apart. The work
    runs where `fanout` says (flywheel/fanout.py): here, or in shards of tasks on Ray."""
    sampling = sampling or rt.config.sampling
    return rt.fanout.map(rollouts, tasks, engine=True, cycle=cycle, sampling=sampling, label=label)


def rollouts(rt, tasks: list[TaskSpec], cycle: int, sampling: SamplingConfig, label: str) -> list[Trajectory]:
    """k trajectories per task, grouped by task in the order of `tasks` (see the module
    docstring for why)."""
    cfg = rt.config
    budget = cfg.engine.max_model_len - sampling.max_tokens
    prompts = [encode_chat(rt.tokenizer, t.prompt) for t in tasks]
    too_long = [t.task_id for t, p in zip(tasks, prompts) if len(p) > budget]
    if too_long:  # the sample stage quarantines these; a caller that did not is told
        raise ValueError(f"prompts longer than max_model_len - max_tokens ({budget}): {too_long}")
    spec = SamplingSpec(
        n=sampling.k, temperature=sampling.temperature, top_p=sampling.top_p,
        max_tokens=sampling.max_tokens, seed=int(stable_id(cfg.seed, cycle, label), 16) % (2**31),
    )  # fmt: skip
    position = {t.task_id: i for i, t in enumerate(tasks)}
    multi_turn = {d for d in {t.domain for t in tasks} if is_multi_turn(d)}
    multi = [t for t in tasks if t.domain in multi_turn]
    out: list[Trajectory] = play_episodes(rt, multi, cycle, sampling, spec, label) if multi else []
    prompts = [p for t, p in zip(tasks, prompts) if t.domain not in multi_turn]
    tasks = [t for t in tasks if t.domain not in multi_turn]
    batch = max(1, -(-len(tasks) // 4))
    with stage("generate", total=len(tasks) * spec.n) as advance:
        for start in range(0, len(tasks), batch):
            t0 = time.monotonic()
            groups = rt.engine.generate(prompts[start : start + batch], spec)
            per_sample = (time.monotonic() - t0) / max(1, sum(len(g) for g in groups))
            for task_spec, prompt_ids, samples in zip(tasks[start:], prompts[start:], groups):
                for i, s in enumerate(samples):
                    out.append(pending_trajectory(rt, cycle, label, task_spec, prompt_ids, i, s, per_sample))
                advance(len(samples))
    return sorted(out, key=lambda tr: (position[tr.task_id], tr.sample_index))
