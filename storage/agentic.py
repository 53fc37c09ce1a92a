"""The agentic metrics of episodes (multi-turn domains), as DuckDB views: their one definition.

An episode is a trajectory the multi-turn runner played (flywheel.tasks.multiturn): its
`timings_json` holds `episode_s`, which only that runner writes (since episodes entered
the cycle), so single-turn rows never count here. `define(con, source, keys)` puts these
views over a relation of trajectory rows (`evaluations` in storage/evals.py, keyed by
policy version, mode, domain and level; the committed `trajectories` in storage/query.py,
keyed by run, cycle, domain and level):

  agentic_episodes  one row per episode: passed, turns, tokens the model sampled (NaN
                    logprobs mark observation tokens, which are not counted), wall seconds,
                    its steps classified, the tool-call accuracy where the source keeps
                    expected calls, and `failure`, the one reason it failed;
  agentic_cells     one row per key: episodes, tasks, completed (verdict pass), completion
                    rate, turns and sampled tokens per solved episode (the mean over passing
                    episodes), call validity, call accuracy, wall time per episode, and the
                    count of each failure;
  agentic_failures  one row per key and failure: episodes, share of the key's episodes;
  agentic_tasks     one row per key and task: n episodes, c passed;
  agentic_pass_k    one row per key and k (1..n): pass@k, the chance that at least one of k
                    samples passes, and pass^k, that all k pass (tau-bench), each with the
                    unbiased estimator over a task's n samples, 1 - C(n-c, k)/C(n, k) and
                    C(c, k)/C(n, k), averaged over the tasks with n >= k.

Calls. Every step of an episode is one call attempt (a reply that calls nothing is one
step, `no_call`), so validity is over turns as the valid-call process reward counts it
(environments/toolkit/agentic.py). `call_kind(action)` classifies a step: `valid`,
`no_call`, `parse` (not JSON, not an object with a name, arguments not JSON),
`unknown_tool` (a tool the task does not offer), `arguments` (missing or mistyped
arguments); from the action's `kind` key where the writer put one, else from the reason
the parser wrote (environments/toolkit/tools.py; tests/test_agentic_metrics.py holds the two
in step). The rates are cumulative: parses >= names a real tool >= matches the schema.

Failures, first match wins: `sandbox_error` (verdict error, the runner's "error", or a
valid call the sandbox could not run: exit code null), `time_limit` (verdict timeout, or
finish reason "time_limit"), `suspected_hack`, `invalid_calls` (not submitted, and more
than half its calls invalid), `out_of_turns` (the turn budget), `out_of_tokens` (the
context budget), else `tests_failed` (the final check said no).

Intervals are not SQL (flywheel/reports/agentic_report.py puts a Wilson interval on
completed / episodes). Not done: time to first passing call; per-turn accuracy for sources
whose expected calls are split by user turn (the environment's `call_accuracy` decides).
"""

from __future__ import annotations

import duckdb

# A step's call kind; NULL for a step that is not a tool call (the single-turn verify step).
MACROS = """
CREATE OR REPLACE MACRO call_kind(action) AS CASE
    WHEN action IS NULL OR NOT json_valid(action) THEN NULL
    WHEN json_extract_string(action, '$.invalid') IS NULL THEN 'valid'
    WHEN json_extract_string(action, '$.kind') IS NOT NULL THEN json_extract_string(action, '$.kind')
    WHEN json_extract_string(action, '$.invalid') = 'no tool call in the reply' THEN 'no_call'
    WHEN json_extract_string(action, '$.invalid') LIKE 'unknown tool%' THEN 'unknown_tool'
    WHEN json_extract_string(action, '$.invalid') LIKE '%not valid JSON%'
      OR json_extract_string(action, '$.invalid') LIKE 'a tool call is a JSON object%' THEN 'parse'
    ELSE 'arguments' END;
CREATE OR REPLACE MACRO episode_seconds(timings) AS CASE
    WHEN timings IS NOT NULL AND json_valid(timings)
    THEN TRY_CAST(json_extract_string(timings, '$.episode_s') AS DOUBLE) END;
CREATE OR REPLACE MACRO choose_ratio(a, b, k) AS CASE
    WHEN a < k THEN 0.0 ELSE list_product(list_transform(range(k), lambda i: (a - i) / (b - i)::DOUBLE)) END;
"""

EPISODES_VIEW = """
CREATE OR REPLACE VIEW agentic_episodes AS
WITH ep AS (
    SELECT {keys}, task_id, trajectory_id, verdict, finish_reason, num_turns, reward,
           verdict = 'pass' AS passed,
           len(list_filter(completion_logprobs, lambda x: NOT isnan(x))) AS sampled_tokens,
           len(prompt_token_ids) + len(completion_token_ids) AS context_tokens,
           episode_seconds(timings_json) AS wall_s,
           list_filter(reward_components, lambda c: c.name = 'tool_call_accuracy')[1].value AS call_accuracy,
           list_transform(steps, lambda s: call_kind(s.action)) AS kinds,
           len(list_filter(steps, lambda s: call_kind(s.action) = 'valid' AND s.exit_code IS NULL))
               AS sandbox_errors
    FROM {source} WHERE episode_seconds(timings_json) IS NOT NULL
), counted AS (
    SELECT * EXCLUDE (kinds), len(kinds) AS calls,
           len(list_filter(kinds, lambda k: k NOT IN ('no_call', 'parse'))) AS parsed,
           len(list_filter(kinds, lambda k: k NOT IN ('no_call', 'parse', 'unknown_tool'))) AS named,
           len(list_filter(kinds, lambda k: k = 'valid')) AS valid,
           len(list_filter(kinds, lambda k: k = 'no_call')) AS no_call
    FROM ep
)
SELECT *, CASE
    WHEN passed THEN NULL
    WHEN verdict = 'error' OR finish_reason = 'error' OR sandbox_errors > 0 THEN 'sandbox_error'
    WHEN verdict = 'timeout' OR finish_reason = 'time_limit' THEN 'time_limit'
    WHEN verdict = 'suspected_hack' THEN 'suspected_hack'
    WHEN finish_reason <> 'submit' AND calls > 0 AND valid * 2 < calls THEN 'invalid_calls'
    WHEN finish_reason = 'max_turns' THEN 'out_of_turns'
    WHEN finish_reason = 'max_tokens' THEN 'out_of_tokens'
    ELSE 'tests_failed' END AS failure
FROM counted
"""

FAILURES = ("out_of_turns", "out_of_tokens", "invalid_calls", "tests_failed", "time_limit", "sandbox_error",
            "suspected_hack")  # fmt: skip

CELLS_VIEW = """
CREATE OR REPLACE VIEW agentic_cells AS
SELECT {keys}, count(*) AS episodes, count(DISTINCT task_id) AS tasks, sum(passed::INT)::INT AS completed,
       avg(passed::INT) AS completion_rate,
       avg(num_turns) FILTER (WHERE passed) AS turns_per_solved,
       avg(sampled_tokens) FILTER (WHERE passed) AS tokens_per_solved,
       sum(calls)::INT AS calls,
       sum(parsed) / nullif(sum(calls), 0) AS call_parses,
       sum(named) / nullif(sum(calls), 0) AS call_names_tool,
       sum(valid) / nullif(sum(calls), 0) AS call_valid,
       avg(call_accuracy) AS call_accuracy,
       avg(wall_s) AS wall_s_per_episode,
       {failures}
FROM agentic_episodes GROUP BY ALL
"""

FAILURES_VIEW = """
CREATE OR REPLACE VIEW agentic_failures AS
WITH counted AS (
    SELECT {keys}, coalesce(failure, 'passed') AS failure, count(*)::INT AS episodes
    FROM agentic_episodes GROUP BY {keys}, coalesce(failure, 'passed')
)
SELECT *, episodes / sum(episodes) OVER (PARTITION BY {keys}) AS share FROM counted
QUALIFY failure <> 'passed'
"""

TASKS_VIEW = """
CREATE OR REPLACE VIEW agentic_tasks AS
SELECT {keys}, task_id, count(*)::INT AS n, sum(passed::INT)::INT AS c FROM agentic_episodes GROUP BY ALL
"""

PASS_K_VIEW = """
CREATE OR REPLACE VIEW agentic_pass_k AS
SELECT {keys}, k, count(*)::INT AS tasks,
       avg(1 - choose_ratio(n - c, n, k)) AS pass_at_k, avg(choose_ratio(c, n, k)) AS pass_hat_k
FROM (SELECT *, unnest(range(1, n + 1)) AS k FROM agentic_tasks)
GROUP BY ALL
"""


def define(con: duckdb.DuckDBPyConnection, source: str, keys: list[str]) -> None:
    """The views above over the relation `source` (trajectory rows), grouped by `keys`."""
    fmt = {"source": source, "keys": ", ".join(keys)}
    con.execute(MACROS)
    failures = ", ".join(f"count(*) FILTER (WHERE failure = '{f}')::INT AS {f}" for f in FAILURES)
    for view in (EPISODES_VIEW, TASKS_VIEW, PASS_K_VIEW, FAILURES_VIEW):
        con.execute(view.format(**fmt))
    con.execute(CELLS_VIEW.format(failures=failures, **fmt))
