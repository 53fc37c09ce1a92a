"""Stage 5, archive: the cycle's tasks and trajectories go into the lake, commit marker
last, with the episodes it parked for the next cycle (partial rollouts: tasks/carry.py,
storage/carried.py). Retried on storage errors (an S3 hiccup); re-running replaces, never
duplicates."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.storage.carried import carried_table
from flywheel.storage.schema import TaskSpec, Trajectory
from flywheel.tasks.context import RunParts


@task(name="archive", retries=2, retry_delay_seconds=2, timeout_seconds=600, cache_policy=NO_CACHE)
def archive(rt: RunParts, cycle: int, tasks: list[TaskSpec], trajectories: list[Trajectory],
            parked: list[dict] | None = None) -> dict:  # fmt: skip
    extra = {"carried": carried_table(parked)} if parked else None
    return rt.lake.commit_cycle(rt.run_id, cycle, tasks, trajectories, extra)
