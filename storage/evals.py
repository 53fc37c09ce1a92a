"""Evaluations in the lake, and the one definition of their metrics (DuckDB views).

An evaluation of policy version v of a run, sampled one way (`mode`: "greedy" for
pass@1, "sampled" for pass@k), is one Parquet file of trajectories under
`evaluations/run=<run>/policy=v<v>/mode=<mode>/` (storage/lake.py). `connect` registers
every evaluation of a run as `evaluations` and defines:

  eval_tasks   one row per (policy_version, mode, domain, level, task): solved (any sample
               passed), mean reward, turns, tokens, tool calls;
  eval_cells   one row per (policy_version, mode, domain, level): tasks, solved, mean
               reward, share of tasks with any reward, mean turns, tokens per solved
               task, tool-call validity.

and, over the episodes of multi-turn domains, the agentic views of storage/agentic.py
(agentic_episodes, agentic_cells, agentic_failures, agentic_tasks, agentic_pass_k), keyed by
policy version, mode, domain and level; a valid call is `call_kind` = 'valid' there and here.

Intervals are not SQL: flywheel/reports/stats.py puts a Wilson interval on each cell's solved /
tasks and a paired bootstrap on two versions' eval_tasks (flywheel/reports/eval_report.py).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from flywheel.storage import agentic
from flywheel.storage.schema import TRAJECTORY_SCHEMA

EVAL_TASKS_VIEW = """
CREATE OR REPLACE VIEW eval_tasks AS
SELECT policy_version, mode, domain, level, task_id,
       max((verdict = 'pass')::INT) AS solved, avg(reward) AS reward, avg(num_turns) AS turns,
       sum(len(completion_token_ids)) AS tokens, sum(num_tool_calls) AS calls,
       sum(len(list_filter(steps, lambda s: call_kind(s.action) = 'valid'))) FILTER (WHERE num_tool_calls > 0)
           AS valid_calls
FROM evaluations GROUP BY ALL
"""

EVAL_CELLS_VIEW = """
CREATE OR REPLACE VIEW eval_cells AS
SELECT policy_version, mode, domain, level, count(*) AS tasks, sum(solved)::INT AS solved,
       avg(reward) AS mean_reward, avg((reward > 0)::INT) AS with_reward, avg(turns) AS mean_turns,
       CASE WHEN sum(solved) > 0 THEN sum(tokens) / sum(solved) END AS tokens_per_solved,
       CASE WHEN sum(calls) > 0 THEN sum(valid_calls) / sum(calls) END AS tool_call_validity
FROM eval_tasks GROUP BY ALL
"""


def connect(lake, run_id: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over every evaluation of `run_id`, with the views above; each
    file's mode comes from its path (the rows hold their policy version)."""
    tables = []
    for path, mode in lake.evaluation_files(run_id):
        t = ds.dataset([path], schema=TRAJECTORY_SCHEMA, format="parquet", filesystem=lake.fs).to_table()
        tables.append(t.append_column("mode", pa.array([mode] * t.num_rows, pa.string())))
    schema = TRAJECTORY_SCHEMA.append(pa.field("mode", pa.string()))
    con = duckdb.connect()
    con.register("evaluations", pa.concat_tables(tables) if tables else schema.empty_table())
    agentic.define(con, "evaluations", ["policy_version", "mode", "domain", "level"])
    con.execute(EVAL_TASKS_VIEW)
    con.execute(EVAL_CELLS_VIEW)
    return con
