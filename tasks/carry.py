"""Partial rollouts: episodes that a cycle's generate budget left unfinished go on in the
next cycle, under the weights the update between them made.

The unit is the group (a task's k episodes: GRPO's baseline is their mean), so that an
advantage is never taken over part of a group. At the end of the generate stage
(`generation.partial.stage_tokens` / `stage_seconds` spent: tasks/parking.py), a group
whose episodes all finished leaves as rollouts; any other group is *parked* whole: each
member (finished ones with their score) as a Rollout carrying its state (`carry`,
`state_of`), which the flow hands to the archive stage instead of the score stage. The
archive commits them with the cycle (storage/carried.py), so they exist exactly when the
cycle does.

The next cycle's generate stage reads them back (`resume`), and plays the unfinished
members alongside its new tasks from where they stopped: same chat, same token sequence,
same workspace files (tasks/parking.py). Every turn records the policy version that
sampled it, and the logprobs recorded are each token's behaviour logprobs, so a finished
partial rollout is an off-policy sample like an asynchronous run's: its trajectory gets the
oldest version among its tokens as `policy_version` (its lag at update time is then >= 1,
which turns on the truncated importance weights of policy/grpo.py for its tokens; the
tokens sampled by the current policy get weights of about 1), and a step-wise turn its own.
Its trajectory id and group id are those of the cycle it began in (`started_cycle`), so a
re-run of either cycle writes the same ids.

Staleness: a carried group whose oldest sampled token is more than `partial.max_lag`
versions behind the engine is not continued: `stale: drop` forgets it, `restart` plays
its task afresh in this cycle (a new group, this cycle's ids).

Exactly once, across kill -9: cycle c reads only what committed cycle c - 1 parked, and
writes what it finished and what it parks again in its own commit. Killed before that
commit, cycle c is re-run from the same committed input; after it, cycle c + 1 reads c's.

Not done: partial rollouts with Ray fanout (each shard would take every carried group);
a stale group's finished members are dropped with it rather than trained alone.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict

from flywheel.environments.base import Score
from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS
from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.storage.schema import TaskSpec
from flywheel.tasks.history import History
from flywheel.tasks.multiturn import Episode
from flywheel.tasks.records import Rollout


def state_of(ep: Episode) -> dict:
    """The episode as plain JSON data (NaN logprobs as null)."""
    return {
        "task": asdict(ep.task), "sample_index": ep.sample_index, "messages": ep.messages,
        "prompt_token_ids": ep.prompt_token_ids, "completion_token_ids": ep.completion_token_ids,
        "completion_logprobs": [None if math.isnan(x) else x for x in ep.completion_logprobs],
        "steps": ep.steps, "num_turns": ep.num_turns, "finish_reason": ep.finish_reason,
        "score": asdict(ep.score) if ep.score is not None else None, "tools": ep.tools, "seconds": ep.seconds,
        "user_turn": ep.user_turn, "history": asdict(ep.history), "context": asdict(ep.context),
        "workspace_tree": ep.workspace_tree, "started_cycle": ep.started_cycle,
    }  # fmt: skip


def episode_of(state: dict, env) -> Episode:
    """An Episode back from `state_of` (its counters of the stage it ran in zeroed)."""
    s = dict(state)
    s["task"] = TaskSpec(**s["task"])
    s["completion_logprobs"] = [math.nan if x is None else x for x in s["completion_logprobs"]]
    s["score"] = Score(**s["score"]) if s["score"] is not None else None
    s["history"] = History(**s["history"])
    s["context"] = ContextPolicy(**s["context"])
    return Episode(env=env, **s)


def oldest_version(ep: Episode) -> int:
    versions = [t["policy_version"] for t in ep.history.turns]
    return min(versions) if versions else -1


def parked_rollout(ep: Episode, cycle: int, run_id: str) -> Rollout:
    """A member of a parked group, as the Rollout the flow hands to the archive stage."""
    if ep.started_cycle is None:
        ep.started_cycle = cycle
    row = {"run_id": run_id, "cycle": cycle, "started_cycle": ep.started_cycle, "task_id": ep.task.task_id,
           "domain": ep.task.domain, "sample_index": ep.sample_index, "finished": ep.score is not None,
           "oldest_version": oldest_version(ep), "state_json": json.dumps(state_of(ep))}  # fmt: skip
    return Rollout(task=ep.task, sample_index=ep.sample_index, messages=[], prompt_token_ids=ep.prompt_token_ids,
                   completion_token_ids=[], completion_logprobs=[], finish_reason="parked",
                   timings=ep.timings(), carry=row)  # fmt: skip


def settle(group: list[Episode], cycle: int, run_id: str, weights=DEFAULT_WEIGHTS) -> list[Rollout]:
    """A group's rollouts when all its episodes finished, else all of it parked."""
    if all(ep.score is not None for ep in group):
        return [ep.rollout(weights) for ep in group]
    return [parked_rollout(ep, cycle, run_id) for ep in group]


def resume(
    rows: list[dict], domains, version: int, max_lag: int
) -> tuple[list[list[Episode]], list[TaskSpec]]:
    """The carried groups of `rows` (storage/carried.py) to continue at policy `version`,
    and the tasks of those too stale to (oldest token more than `max_lag` versions back)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["started_cycle"], row["task_id"])].append(row)
    keep, stale = [], []
    for _, members in sorted(groups.items()):
        versions = [r["oldest_version"] for r in members if r["oldest_version"] >= 0]
        episodes = [episode_of(json.loads(r["state_json"]), domains[r["domain"]])
                    for r in sorted(members, key=lambda r: r["sample_index"])]  # fmt: skip
        if versions and version - min(versions) > max_lag:
            stale.append(episodes[0].task)
        else:
            keep.append(episodes)
    return keep, stale


def split_parked(rollouts: list[Rollout]) -> tuple[list[Rollout], list[dict]]:
    """(the rollouts to score, the rows of the parked episodes for the archive)."""
    return [r for r in rollouts if r.carry is None], [r.carry for r in rollouts if r.carry is not None]
