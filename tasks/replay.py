"""Stage 7, replay: failures of recent cycles are queued, in the lake, for the next one.
The queue is a file per cycle, so a resumed run finds it instead of recomputing it."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from storage.query import select_replay
from storage.schema import TaskSpec


@task(name="replay", cache_policy=NO_CACHE)
def replay(rt, cycle: int) -> list[TaskSpec]:
    cfg = rt.config.replay
    queue = []
    if cfg.enabled:
        queue = select_replay(
            rt.lake, rt.run_id, cycle, cfg.threshold, cfg.lookback_cycles, cfg.max_replays, cfg.priority, cfg.min_best
        )
    rt.lake.write_replay_queue(rt.run_id, cycle + 1, queue)
    return queue
