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
  `episode_score`. What each turn's prompt holds of the history is the domain's context
  policy (`generation.context`, `generation.context_domains`, else the domain's own).
  With partial rollouts (`generation.partial`, tasks/carry.py) the flow passes the
  episodes the previous cycle parked (`carried`); they are played on beside the new
  tasks, the stage stops asking for turns at its budget, and the groups it leaves
  unfinished come back as parked Rollouts (`carry` set) for the archive stage.

`generation_stats` is the stage's one account of its episodes' engine use: slot
utilisation = the seconds episodes waited on the engine (a turn submitted, its reply not
yet collected) over the runner's slot-seconds (its live-episode slots x its wall time),
and sampled tokens per second of that wall time.

Rollouts come out grouped by task in the order of the task list, so a list cut into
shards (flywheel/run/fanout.py) and joined back gives the same ids, groups and order as the
whole list. Not the same sampled text: the engine's random stream is seeded per engine
call, and shards make different calls.
"""

from __future__ import annotations

import dataclasses
import functools
import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.config.long_horizon import context_policy
from flywheel.environments.toolkit.agentic import RewardWeights
from flywheel.reports.progress import stage
from flywheel.policy.chat import encode_chat
from flywheel.policy.engines import SamplingSpec
from flywheel.tasks.agent_runs import agent_rollouts
from flywheel.tasks.carry import resume, settle
from flywheel.tasks.multiturn import Episode, run_episodes
from flywheel.tasks.parking import StageBudget
from flywheel.storage.schema import TaskSpec, stable_id
from flywheel.tasks.context import FanoutRun, Parts, StageContext
from flywheel.tasks.records import Rollout

CALL_SEQUENCES = 256


@task(name="generate", cache_policy=NO_CACHE)
def generate(
    rt: FanoutRun, ctx: StageContext, tasks: list[TaskSpec], carried: list[dict] | None = None
) -> list[Rollout]:
    """k rollouts per task. The work runs where `fanout` says (flywheel/run/fanout.py): here,
    or in shards of tasks on Ray. `carried`: the episodes the previous cycle parked
    (storage/carried.py rows); None: no partial rollouts, nothing is parked."""
    if carried is None:
        return rt.fanout.map(rollouts, tasks, ctx, engine=True)
    if getattr(rt.fanout, "name", "local") != "local":
        raise ValueError("partial rollouts (generation.partial) need fanout.backend local")
    return rt.fanout.map(functools.partial(rollouts, carried=carried), tasks, ctx, engine=True)


def sampling_spec(ctx: StageContext) -> SamplingSpec:
    s = ctx.generation
    seed = int(stable_id(ctx.config.seed, ctx.cycle, ctx.label), 16) % (2**31)
    return SamplingSpec(n=s.k, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=seed)


def rollouts(
    parts: Parts, ctx: StageContext, tasks: list[TaskSpec], carried: list[dict] | None = None
) -> list[Rollout]:
    """k rollouts per task, grouped by task in the order of `tasks` (see the module
    docstring for why), then the carried groups'."""
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
    out = play_episodes(parts, ctx, episodes, spec, carried) if episodes or carried else []
    out += sample_replies(parts, single, [prompts[t.task_id] for t in single], spec)
    return sorted(out, key=lambda r: (position.get(r.task.task_id, len(tasks)), r.task.task_id, r.sample_index))


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
    parts: Parts, ctx: StageContext, tasks: list[TaskSpec], spec: SamplingSpec, carried: list[dict] | None = None
) -> list[Rollout]:
    """Multi-turn tasks: k scored episodes each, from one runner call (so that a free
    workspace takes the next trajectory at once); progress advances per episode. With
    `carried` (partial rollouts): the carried groups too, and the unfinished parked."""
    r, g = ctx.config.reward, ctx.generation
    weights = RewardWeights(r.outcome_weight, r.valid_weight, r.progress_weight, r.recovery_weight, r.turn_weight)
    budget: StageBudget | None = None
    resumed: list[list[Episode]] = []
    stale: list[TaskSpec] = []
    if carried is not None:
        p = g.partial
        budget = StageBudget(p.stage_tokens, p.stage_seconds, p.on_budget == "carry") if p.on else None
        resumed, stale = resume(carried, parts.domains, ctx.policy_version, p.max_lag)
        stale = stale if p.stale == "restart" else []
    jobs = [(t, parts.domains[t.domain], spec.n) for t in [*tasks, *stale]]
    unfinished = [ep for group in resumed for ep in group if ep.score is None]
    with stage("episodes", total=len(jobs) * spec.n + len(unfinished)) as advance:
        groups = run_episodes(
            parts.engine, parts.tokenizer, parts.sandbox, jobs,
            max_turns=g.max_turns, max_tokens=ctx.config.engine.max_model_len,
            sampling=dataclasses.replace(spec, n=1), weights=weights, tool_format=g.tool_format,
            continuous=g.continuous_turns, on_episode=lambda ep: advance(1),
            context=lambda env: context_policy(g, env),
            policy_version=ctx.policy_version, stage_budget=budget, carried=unfinished,
            episode_seconds=g.episode_seconds or None,
        )  # fmt: skip
    if carried is None:
        return [ep.rollout(weights) for group in groups for ep in group]
    return [r for group in [*groups, *resumed] for r in settle(group, ctx.cycle, ctx.run_id, weights)]


def generation_stats(rollouts: list[Rollout]) -> dict[str, float]:
    """The episodes' engine use in the stage (see the module docstring); {} without episodes."""
    played = [r.timings for r in rollouts if "play_s" in r.timings]
    runs = {(t["slots"], t["play_s"]) for t in played}
    slot_seconds = sum(slots * seconds for slots, seconds in runs)
    if not slot_seconds:
        return {}
    engine_s, tokens = sum(t["engine_s"] for t in played), sum(t["sampled_tokens"] for t in played)
    return {"slot_utilisation": round(engine_s / slot_seconds, 4), "episode_tokens": tokens,
            "episode_tokens_per_s": round(tokens / max(s for _, s in runs), 2),
            "parked": sum(r.carry is not None for r in rollouts),
            "carried_finished": sum(r.carry is None and r.started_cycle is not None for r in rollouts)}  # fmt: skip
