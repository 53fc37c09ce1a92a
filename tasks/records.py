"""What generation produces (`Rollout`) and the one function that makes a Trajectory record.

A rollout is a sampled trajectory before scoring: its messages, tokens, logprobs and
steps. Single-turn rollouts leave the generate stage unscored; multi-turn ones were
scored in their workspace before it was released, and carry that `episode_score`. The
score stage turns every rollout into a `flywheel.storage.schema.Trajectory` through
`trajectory_record`, so every field of a record is filled in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from flywheel.environments.base import Score
from flywheel.storage.schema import TaskSpec, Trajectory, stable_id
from flywheel.tasks.context import StageContext


@dataclass
class Rollout:
    task: TaskSpec
    sample_index: int
    messages: list[dict]  # the prompt, then the assistant's (and tools') messages
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float]  # NaN at observation tokens (multi-turn)
    finish_reason: str
    timings: dict[str, float]
    num_turns: int = 1
    steps: list[dict] = field(default_factory=list)
    episode_score: Score | None = None  # multi-turn only: scored in its workspace
    verifier_version: str = ""
    turns: list[dict] | None = None  # step-wise: each request as presented (storage/schema.py TURN)
    started_cycle: int | None = None  # a partial rollout: the cycle it began in (its id and group are that cycle's)
    policy_version: int | None = None  # a partial rollout: the oldest policy that sampled it
    carry: dict | None = None  # a parked episode's state, for the next cycle (tasks/carry.py); not a rollout yet

    @property
    def completion(self) -> str:
        return self.messages[-1]["content"]


def trajectory_record(ctx: StageContext, r: Rollout, score: Score, *, steps: list[dict] | None = None,
                      timings: dict | None = None, components: list[dict] | None = None,
                      penalty: float = 0.0) -> Trajectory:  # fmt: skip
    """The lake's record of rollout `r` scored `score`; `penalty` is added to the reward
    and kept in `reward_penalty` (the overlong penalty); `components` are the reward's
    parts, one entry each ({"name", "value", "error"})."""
    t = r.task
    began = ctx.cycle if r.started_cycle is None else r.started_cycle
    return Trajectory(
        trajectory_id=Trajectory.make_id(f"{ctx.run_id}/{ctx.label}", began, t.task_id, r.sample_index),
        run_id=ctx.run_id, cycle=ctx.cycle, policy_lag=ctx.policy_lag,
        policy_version=ctx.policy_version if r.policy_version is None else r.policy_version,
        task_id=t.task_id, domain=t.domain, level=t.level, split=t.split, origin=t.origin,
        replay_count=t.replay_count, origin_cycle=t.origin_cycle,
        group_id=stable_id(ctx.run_id, ctx.label, began, t.task_id), sample_index=r.sample_index,
        messages=r.messages, steps=r.steps + (steps or []), prompt_token_ids=r.prompt_token_ids,
        completion_token_ids=r.completion_token_ids, completion_logprobs=r.completion_logprobs,
        finish_reason=r.finish_reason, num_turns=r.num_turns, num_tool_calls=len(r.steps),
        reward=score.reward + penalty, reward_outcome=score.outcome, reward_process=score.process,
        reward_penalty=score.penalty + penalty, verdict=score.verdict, error=score.error,
        tests_passed=score.tests_passed, tests_total=score.tests_total,
        sandbox_backend=ctx.config.sandbox.backend, verifier_version=r.verifier_version,
        timings_json=json.dumps({**r.timings, **(timings or {})}), reward_components=components or [],
        turns=r.turns, started_cycle=-1 if r.started_cycle is None else r.started_cycle,
    )  # fmt: skip
