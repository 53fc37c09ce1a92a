"""DuckDB over the lake, and the replay query.

DuckDB reads the lake through `con.register(name, pyarrow_dataset)`: this works offline,
on any DuckDB version, and through the same pyarrow filesystem (local or S3) the lake
writes with, so no httpfs extension is needed.
"""

from __future__ import annotations

import dataclasses

import duckdb

from storage.lake import Lake
from storage.schema import TaskSpec


def connect(lake: Lake, run_id: str | None = None) -> duckdb.DuckDBPyConnection:
    """A connection with the committed `trajectories` and `tasks` registered as views."""
    con = duckdb.connect()
    con.register("trajectories", lake.dataset("trajectories", run_id))
    con.register("tasks", lake.dataset("tasks", run_id))
    return con


REPLAY_SQL = """
WITH per_task AS (
    SELECT task_id, cycle, max(reward) AS best
    FROM trajectories
    WHERE split = 'train'
    GROUP BY task_id, cycle
),
latest AS (  -- a task's most recent attempt decides: solved since means not replayed
    SELECT task_id, arg_max(best, cycle) AS last_best, max(cycle) AS last_cycle
    FROM per_task
    GROUP BY task_id
)
SELECT task_id, last_best
FROM latest
WHERE last_cycle > ? - ? AND last_cycle <= ? AND last_best < ?
ORDER BY last_cycle DESC, last_best DESC, task_id
"""


def select_replay(
    lake: Lake, run_id: str, cycle: int, threshold: float, lookback: int, max_replays: int
) -> list[TaskSpec]:
    """Train-split tasks that failed in the last `lookback` cycles up to `cycle`, not solved
    since, replayed fewer than `max_replays` times; newest and nearest misses first."""
    if not lake.committed_cycles(run_id):
        return []
    con = connect(lake, run_id)
    rows = con.execute(REPLAY_SQL, [cycle, lookback, cycle, threshold]).fetchall()
    if not rows:
        return []
    latest_spec: dict[str, TaskSpec] = {}
    for c in range(max(0, cycle - lookback + 1), cycle + 1):  # ascending: the latest wins
        for spec in lake.tasks(run_id, cycles=[c]):
            latest_spec[spec.task_id] = spec
    out = []
    for task_id, _ in rows:
        spec = latest_spec.get(task_id)
        if spec is None or spec.split != "train" or spec.replay_count >= max_replays:
            continue
        out.append(dataclasses.replace(spec, origin="replay", replay_count=spec.replay_count + 1))
    return out
