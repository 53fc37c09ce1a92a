"""Stage 2, generate: k samples per task from the engine, as `Rollout`s (tasks/records.py).

Dispatch on the domain's kind, once per task list:
- single-turn ("check" and "sandbox" domains: the answer is the whole action): one engine
  call per batch of prompts; the rollouts leave unscored and the score stage verifies
  them. Batches hold at least CALL_SEQUENCES sequences (prompts x k), so that progress
  shows on long lists without starving vLLM, which batches within each call (cutting a
  cycle's 32 sequences into four calls of 8 cost more than half its throughput).
- with `agent.entry` set (offline mode), none of these: the user's agent plays every task
  against the gateway, in the sandbox, and its recorded sessions are the rollouts
  (tasks/agent_runs.py).
- "episode" domains (environments/toolkit/agentic.py): the episode runner (tasks/multiturn.py)
  plays each trajectory turn by turn in its own sandbox workspace, each turn joining the
  engine's running batch as soon as it is ready (`generation.continuous_turns`), and the
  domain scores the final workspace before it is released, so these rollouts carry their
  `episode_score`.

Rollouts come out grouped by task in the order of the task list, so a list cut into
shards (flywheel/run/fanout.py) and joined back gives the same ids, groups and order as the
whole list. Not the same sampled text: the engine's random stream is seeded per engine
call, and shards make different calls.
"""

from __future__ import annotations

import dataclasses
import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.environments.toolkit.agentic import RewardWeights
from flywheel.reports.progress import stage
from flywheel.policy.chat import encode_chat
from flywheel.policy.engines import SamplingSpec
from flywheel.tasks.agent_runs import agent_rollouts
from flywheel.tasks.multiturn import run_episodes
from flywheel.storage.schema import TaskSpec, stable_id
from flywheel.tasks.context import FanoutRun, Parts, StageContext
from flywheel.tasks.records import Rollout

CALL_SEQUENCES = 256


@task(name="generate", cache_policy=NO_CACHE)
def generate(rt: FanoutRun, ctx: StageContext, tasks: list[TaskSpec]) -> list[Rollout]:
    """k rollouts per task. The work runs where `fanout` says (flywheel/run/fanout.py): here,
    or in shards of tasks on Ray."""
    return rt.fanout.map(rollouts, tasks, ctx, engine=True)


def sampling_spec(ctx: StageContext) -> SamplingSpec:
    s = ctx.generation
    seed = int(stable_id(ctx.config.seed, ctx.cycle, ctx.label), 16) % (2**31)
    return SamplingSpec(n=s.k, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=seed)


def rollouts(parts: Parts, ctx: StageContext, tasks: list[TaskSpec]) -> list[Rollout]:
    """k rollouts per task, grouped by task in the order of `tasks` (see the module
    docstring for why)."""
    if ctx.config.agent.entry:
        return agent_rollouts(parts, ctx, tasks)
    budget = ctx.config.engine.max_model_len - ctx.generation.max_tokens
    prompts = {t.task_id: encode_chat(parts.tokenizer, t.prompt) for t in tasks}
    too_long = [t.task_id for t in tasks if len(prompts[t.task_id]) > budget]
    if too_long:  # the sample stage quarantines these; a caller that did not is told
        raise ValueError(f"prompts longer than max_model_len - max_tokens ({budget}): {too_long}")
    spec = sampling_spec(ctx)
    position = {t.task_id: i for i, t in enumerate(tasks)}
    episodes = [t for t in tasks if parts.domains[t.domain].kind == "episode"]
    single = [t for t in tasks if parts.domains[t.domain].kind != "episode"]
    out = play_episodes(parts, ctx, episodes, spec) if episodes else []
    out += sample_replies(parts, single, [prompts[t.task_id] for t in single], spec)
    return sorted(out, key=lambda r: (position[r.task.task_id], r.sample_index))


def sample_replies(
    parts: Parts, tasks: list[TaskSpec], prompts: list[list[int]], spec: SamplingSpec
) -> list[Rollout]:
    out: list[Rollout] = []
    batch = max(-(-len(tasks) // 4), -(-CALL_SEQUENCES // spec.n), 1)
    with stage("generate", total=len(tasks) * spec.n) as advance:
        for start in range(0, len(tasks), batch):
            t0 = time.monotonic()
            groups = parts.engine.generate(prompts[start : start + batch], spec)
            per_sample = (time.monotonic() - t0) / max(1, sum(len(g) for g in groups))
            for task_spec, prompt_ids, samples in zip(tasks[start:], prompts[start:], groups):
                for i, s in enumerate(samples):
                    out.append(Rollout(
                        task=task_spec, sample_index=i,
                        messages=[*task_spec.prompt, {"role": "assistant", "content": s.text}],
                        prompt_token_ids=prompt_ids, completion_token_ids=s.token_ids,
                        completion_logprobs=s.logprobs, finish_reason=s.finish_reason,
                        timings={"generate_s": per_sample},
                    ))  # fmt: skip
                advance(len(samples))
    return out


def play_episodes(
    parts: Parts, ctx: StageContext, tasks: list[TaskSpec], spec: SamplingSpec
) -> list[Rollout]:
    """Multi-turn tasks: k scored episodes each, from one runner call (so that a free
    workspace takes the next trajectory at once); progress advances per episode."""
    r = ctx.config.reward
    weights = RewardWeights(r.outcome_weight, r.valid_weight, r.progress_weight, r.recovery_weight)
    with stage("episodes", total=len(tasks) * spec.n) as advance:
        groups = run_episodes(
            parts.engine, parts.tokenizer, parts.sandbox, [(t, parts.domains[t.domain], spec.n) for t in tasks],
            max_turns=ctx.generation.max_turns, max_tokens=ctx.config.engine.max_model_len,
            sampling=dataclasses.replace(spec, n=1), weights=weights, tool_format=ctx.generation.tool_format,
            continuous=ctx.generation.continuous_turns, on_episode=lambda ep: advance(1),
        )  # fmt: skip
    return [ep.rollout() for group in groups for ep in group]
