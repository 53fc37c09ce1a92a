"""DuckDB over the lake, and the replay query.

DuckDB reads the lake through `con.register(name, pyarrow_dataset)`: this works offline,
on any DuckDB version, and through the same pyarrow filesystem (local or S3) the lake
writes with, so no httpfs extension is needed.
"""

from __future__ import annotations

import dataclasses

import duckdb

from flywheel.storage import agentic
from flywheel.storage.lake import Lake
from flywheel.storage.schema import TaskSpec
from flywheel.storage.traces import TraceStore


def connect(lake: Lake, run_id: str | None = None) -> duckdb.DuckDBPyConnection:
    """A connection with the committed `trajectories` and `tasks` registered, a
    `cycles` view (one row per run and cycle with its size, reward, pass rate and the
    tokens the model sampled: observation tokens, NaN logprobs, are not counted), a
    `groups` view (GROUPS_VIEW), a `domain_cycles` view (DOMAIN_CYCLES_VIEW), a
    `components` view (COMPONENTS_VIEW), a `signal` view (SIGNAL_VIEW), and the agentic
    views of episodes (storage/agentic.py) per run, cycle, domain and level; and the
    lake's committed production `traces` (storage/traces.py; every workload, every run)."""
    con = duckdb.connect()
    con.register("trajectories", lake.dataset("trajectories", run_id))
    con.register("tasks", lake.dataset("tasks", run_id))
    con.register("traces", TraceStore(lake).dataset())
    con.execute(CYCLES_VIEW)
    con.execute(GROUPS_VIEW)
    con.execute(DOMAIN_CYCLES_VIEW)
    con.execute(COMPONENTS_VIEW)
    con.execute(SIGNAL_VIEW)
    agentic.define(con, "trajectories", ["run_id", "cycle", "domain", "level"])
    return con


# One row per reward component of a trajectory (tasks/score.py): the verifier, each reward
# function, the judge, and `judge_agrees` (1 where the judge's pass matched the verifier's).
COMPONENTS_VIEW = """
CREATE VIEW components AS
SELECT run_id, cycle, domain, level, trajectory_id, c.name AS name, c.value AS value, c.error AS error
FROM (SELECT run_id, cycle, domain, level, trajectory_id, unnest(reward_components) AS c FROM trajectories)
"""


# One row per group (a task's k samples in a cycle): its pass rate, and whether its
# rewards vary (`informative`: a group whose samples all scored alike gives GRPO nothing).
# The curriculum's arm statistics and `flywheel report --by domain` are built on it.
GROUPS_VIEW = """
CREATE VIEW groups AS
SELECT run_id, cycle, domain, level, split, group_id, any_value(task_id) AS task_id, any_value(origin) AS origin,
       count(*) AS samples, avg(reward) AS mean_reward, avg((verdict = 'pass')::INT) AS pass_rate,
       (max(reward) > min(reward))::INT AS informative
FROM trajectories GROUP BY run_id, cycle, domain, level, split, group_id
"""

# One row per run, cycle, domain and split: the one definition of a domain's pass rate in
# a cycle (the heatmap, the workload report). Each sample weighs once, so a group of k
# samples counts k times, not once.
DOMAIN_CYCLES_VIEW = """
CREATE VIEW domain_cycles AS
SELECT run_id, cycle, domain, split, sum(samples)::INT AS samples,
       sum(mean_reward * samples) / sum(samples) AS mean_reward,
       sum(pass_rate * samples) / sum(samples) AS pass_rate
FROM groups GROUP BY run_id, cycle, domain, split
"""


# One row per run, cycle, domain and split: how much GRPO signal its groups gave. `flat_groups`
# had equal rewards (no advantage, nothing learned); of those, `all_zero_groups` scored 0 in
# every sample and `all_one_groups` 1. `no_answer` (verdict no_code: no answer in the format
# the verifier reads) and `truncated` (cut at max_tokens) are shares of the samples that
# failed: the evidence flywheel/reports/zero_signal.py names the likely cause from.
SIGNAL_VIEW = """
CREATE VIEW signal AS
WITH per_group AS (
    SELECT run_id, cycle, domain, split, group_id, min(reward) AS lo, max(reward) AS hi
    FROM trajectories GROUP BY run_id, cycle, domain, split, group_id
), groups_of AS (
    SELECT run_id, cycle, domain, split, count(*) AS groups,
           count(*) FILTER (WHERE NOT hi > lo) AS flat_groups,
           count(*) FILTER (WHERE NOT hi > lo AND hi <= 0) AS all_zero_groups,
           count(*) FILTER (WHERE NOT hi > lo AND lo >= 1) AS all_one_groups
    FROM per_group GROUP BY run_id, cycle, domain, split
), samples_of AS (
    SELECT run_id, cycle, domain, split, count(*) AS samples, min(reward) AS min_reward,
           max(reward) AS max_reward, avg((verdict = 'pass')::INT) AS pass_rate,
           count(*) FILTER (WHERE verdict = 'no_code')
               / greatest(1, count(*) FILTER (WHERE verdict <> 'pass')) AS no_answer,
           count(*) FILTER (WHERE verdict <> 'pass' AND finish_reason = 'length')
               / greatest(1, count(*) FILTER (WHERE verdict <> 'pass')) AS truncated
    FROM trajectories GROUP BY run_id, cycle, domain, split
)
SELECT * FROM samples_of JOIN groups_of USING (run_id, cycle, domain, split)
"""

CYCLES_VIEW = """
CREATE VIEW cycles AS
SELECT run_id, cycle, max(policy_version) AS policy_version, count(DISTINCT task_id) AS tasks,
       count(*) AS trajectories, avg(reward) AS mean_reward, avg((verdict = 'pass')::INT) AS pass_rate,
       count(DISTINCT task_id) FILTER (WHERE origin = 'replay') AS replayed_tasks,
       sum(len(list_filter(completion_logprobs, lambda x: NOT isnan(x)))) AS sampled_tokens,
       min(created_at) AS started_at
FROM trajectories GROUP BY run_id, cycle
"""

# A task's latest attempt inside the window decides: solved since means not replayed.
# Only the window's cycles are read (the filter is pushed into the Parquet scan): a
# failure older than `lookback` cycles ages out, and so does a task solved since.
REPLAY_SQL = """
WITH per_task AS (
    SELECT task_id, cycle, max(reward) AS best, any_value(level) AS level
    FROM trajectories
    WHERE split = 'train' AND cycle > $cycle - $lookback AND cycle <= $cycle
    GROUP BY task_id, cycle
)
SELECT task_id, arg_max(best, cycle) AS last_best, max(cycle) AS last_cycle, any_value(level) AS level
FROM per_task
GROUP BY task_id
HAVING arg_max(best, cycle) < $threshold AND arg_max(best, cycle) > $min_best
ORDER BY {order}, task_id
"""

# Which failures come first when the queue is longer than the sampler takes.
PRIORITIES = {
    "recent": "last_cycle DESC, last_best DESC",  # freshest failures first
    "near_miss": "last_best DESC, last_cycle DESC",  # closest to solved: most signal per sample
    "hardest": "last_best ASC, level DESC, last_cycle DESC",  # furthest from solved
}


def select_replay(
    lake: Lake, run_id: str, cycle: int, threshold: float, lookback: int, max_replays: int,
    priority: str = "recent", min_best: float = -1.0,
) -> list[TaskSpec]:  # fmt: skip
    """Train-split tasks that failed in the last `lookback` cycles up to `cycle`, not solved
    since, replayed fewer than `max_replays` times, ordered by `priority`. Each comes back
    marked as a replay with its count raised and the cycle it first ran in."""
    if priority not in PRIORITIES:
        raise ValueError(f"unknown replay priority {priority!r}; known: {sorted(PRIORITIES)}")
    window = [c for c in lake.committed_cycles(run_id) if cycle - lookback < c <= cycle]
    if not window:
        return []
    con = duckdb.connect()
    con.register("trajectories", lake.dataset("trajectories", run_id, window))
    sql = REPLAY_SQL.format(order=PRIORITIES[priority])
    rows = con.execute(
        sql, {"cycle": cycle, "lookback": lookback, "threshold": threshold, "min_best": min_best}
    ).fetchall()
    if not rows:
        return []
    latest_spec: dict[str, tuple[TaskSpec, int]] = {}
    for c in window:  # ascending: the latest spec of a task wins
        for spec in lake.tasks(run_id, cycles=[c]):
            latest_spec[spec.task_id] = (spec, c)
    out = []
    for task_id, *_ in rows:
        spec, seen_in = latest_spec.get(task_id, (None, -1))
        if spec is None or spec.split != "train" or spec.replay_count >= max_replays:
            continue
        origin_cycle = spec.origin_cycle if spec.origin_cycle >= 0 else seen_in
        out.append(
            dataclasses.replace(
                spec, origin="replay", replay_count=spec.replay_count + 1, origin_cycle=origin_cycle
            )
        )
    return out
