"""Stage 7, replay: failures of recent cycles are queued, in the lake, for the next one,
and so are production's: tasks of sampled `traces:` domains whose logged response failed
(environments/sources/traces.py) that this run has not tried yet, up to
`replay.production_per_cycle`. The queue is a file per cycle, so a resumed run finds it
instead of recomputing it.

Episodes (multi-turn domains: repair, terminal, workspace and Harbor tasks) are replayed
like any failure: the queued TaskSpec is the one the lake kept, and it carries what its
episode needs (the starting files and setup commands in `setup_json`; the hidden tests,
limits and reference in `verifier_json`), so the replay starts from the same workspace
and is checked the same way (tests/test_agentic_replay.py). What counts as failed is the
reward, as for every domain: an episode that passed with a less than perfect process
(an invalid call, a failed step) scores under 1.0 and is queued too, as a near miss.
Not done: a replay restarts the episode from its first turn, never from the turn where
it went wrong; a workspace task whose file is not among the next run's domains cannot be
replayed (its domain is looked up by name, as for every file domain).
For production's agent sessions see environments/sources/traces.py."""

from __future__ import annotations

import dataclasses

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.environments.base import LogsFailures
from flywheel.storage.query import select_replay
from flywheel.storage.schema import TaskSpec
from flywheel.tasks.context import ReplayRun


@task(name="replay", cache_policy=NO_CACHE)
def replay(rt: ReplayRun, cycle: int) -> list[TaskSpec]:
    cfg = rt.config.replay
    queue = []
    if cfg.enabled:
        queue = select_replay(
            rt.lake, rt.run_id, cycle, cfg.threshold, cfg.lookback_cycles, cfg.max_replays, cfg.priority, cfg.min_best
        )
        queue += production_failures(rt, cfg.production_per_cycle, {t.task_id for t in queue})
    rt.lake.write_replay_queue(rt.run_id, cycle + 1, queue)
    return queue


def production_failures(rt: ReplayRun, limit: int, queued: set[str]) -> list[TaskSpec]:
    """Logged failures of the sampled `traces:` domains this run has not tried, the first
    `limit` in a fixed order, as replays (origin_cycle -1: they come from outside)."""
    if limit <= 0:
        return []
    tried = set(rt.lake.dataset("tasks", rt.run_id).to_table(columns=["task_id"]).column("task_id").to_pylist())
    out = []
    for env in rt.domains:
        if not isinstance(env, LogsFailures):
            continue
        failures = env.logged_failures()
        workload = rt.config.workloads.get(env.workload)
        if workload is not None and workload.judge_logged:
            failures += judged_failures(rt, env, tried | queued)
        out += [t for t in failures if t.task_id not in tried and t.task_id not in queued]
    out = list({t.task_id: t for t in out}.values())  # a task flagged both ways once
    return [dataclasses.replace(t, origin="replay", replay_count=1) for t in out[:limit]]


def judged_failures(rt: ReplayRun, env, skip: set[str]) -> list[TaskSpec]:
    """`env`'s untried logged responses that the run's judge scores under its pass score
    (each judged once: the judge's cache keeps the score)."""
    from flywheel.environments.judge import prompt_text

    if rt.judge is None:
        return []
    pairs = [(t, reply) for t, reply in env.logged_passes() if t.task_id not in skip]
    scores = rt.judge.score([(prompt_text(t.prompt), reply) for t, reply in pairs])
    bar = rt.config.reward.judge.pass_score
    return [t for (t, _), j in zip(pairs, scores) if j.value is not None and j.value < bar]
