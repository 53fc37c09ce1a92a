"""Held-out evaluation of a run's current policy (or of any model), per domain and level.

The eval tasks come from a fixed seed, so every evaluation of every run sees the same
tasks and numbers compare across policy versions. pass@1 is greedy (temperature 0, one
sample); pass@k is the share of tasks solved by at least one of k samples at the
training temperature. Trajectories go to the lake under `evaluations/`, never among
the training cycles, and a markdown report lands in the run dir.
"""

from __future__ import annotations

import duckdb
from prefect import flow, get_run_logger

from flywheel.config import FlywheelConfig
from flywheel.reporting import artifact_key
from flywheel.results import EvalResult
from flywheel.runtime import Runtime
from tasks.generate import generate
from tasks.sample import sampled_levels
from tasks.score import score

EVAL_SEED = 20261130  # fixed: every evaluation sees the same held-out tasks

METRICS_SQL = """
WITH greedy_task AS (
    SELECT domain, level, task_id, max((verdict = 'pass')::INT) AS solved, avg(reward) AS reward,
           avg(num_turns) AS turns, sum(len(completion_token_ids)) AS tokens,
           sum(num_tool_calls) AS calls,
           sum(len(list_filter(steps, lambda s: s.action NOT LIKE '%"invalid"%'))) FILTER (WHERE num_tool_calls > 0)
               AS valid_calls
    FROM greedy GROUP BY ALL
), sampled_task AS (
    SELECT task_id, max((verdict = 'pass')::INT) AS solved_any FROM sampled GROUP BY task_id
)
SELECT g.domain, g.level, count(*) AS tasks,
       round(avg(g.solved), 4) AS "pass@1",
       round(avg(coalesce(s.solved_any, 0)), 4) AS "pass@k",
       round(avg(g.reward), 4) AS mean_reward,
       round(avg(g.turns), 2) AS mean_turns,
       CASE WHEN sum(g.solved) > 0 THEN round(sum(g.tokens) / sum(g.solved), 1) END AS tokens_per_solved,
       CASE WHEN sum(g.calls) > 0 THEN round(sum(g.valid_calls) / sum(g.calls), 4) END AS tool_call_validity
FROM greedy_task g LEFT JOIN sampled_task s USING (task_id)
GROUP BY g.domain, g.level ORDER BY g.domain, g.level
"""


def eval_tasks(domains, sampler, per_level: int):
    """`per_level` held-out tasks per sampled domain and level, the same every time."""
    tasks = []
    for name, levels in sampled_levels(domains, sampler).items():
        for level in levels:
            tasks += domains[name].make_tasks("eval", level, EVAL_SEED, per_level)
    return tasks


def _eval_run_name() -> str:
    from prefect.runtime import flow_run

    config = flow_run.parameters.get("config")
    run_id = config.get("run_id") if isinstance(config, dict) else getattr(config, "run_id", "")
    return f"evaluate-{run_id or 'base'}"


@flow(name="evaluate", flow_run_name=_eval_run_name)
def evaluate(config: FlywheelConfig = FlywheelConfig(), tasks_per_level: int = 8, k: int = 4) -> EvalResult:
    """Evaluate the current policy of `config.run_id` (the base model for a new run)."""
    logger = get_run_logger()
    config = config.with_run_id()
    rt = Runtime(config, say=logger.info)
    try:
        tasks = eval_tasks(rt.domains, config.sampler, tasks_per_level)
        greedy_cfg = config.sampling.model_copy(update={"k": 1, "temperature": 0.0})
        sampled_cfg = config.sampling.model_copy(update={"k": k})
        version = rt.policy_version
        tables = {}
        for mode, sampling in (("greedy", greedy_cfg), ("sampled", sampled_cfg)):
            ctx = rt.stage_context(-1, f"eval-{mode}", sampling)
            rollouts = generate.with_options(task_run_name=f"eval-generate-{mode}")(rt, ctx, tasks)
            trajectories = score.with_options(task_run_name=f"eval-score-{mode}")(rt, ctx, rollouts)
            rt.lake.write_evaluation(rt.run_id, version, mode, trajectories)
            tables[mode] = rt.lake.evaluations(rt.run_id, version, mode)  # metrics from what was stored
        con = duckdb.connect()
        con.register("greedy", tables["greedy"])
        con.register("sampled", tables["sampled"])
        cur = con.execute(METRICS_SQL)
        names = [d[0].replace("pass@k", f"pass@{k}") for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        rt.close()
    result = EvalResult(run_id=rt.run_id, policy_version=version, rows=rows)
    _report(rt, result)
    return result


def _report(rt, result: EvalResult) -> None:
    header = list(result.rows[0]) if result.rows else []
    lines = [f"# Evaluation of {result.run_id}, policy v{result.policy_version}", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(r[h]) for h in header) + " |" for r in result.rows]
    text = "\n".join(lines) + "\n"
    (rt.run_dir / f"eval-v{result.policy_version}.md").write_text(text)
    try:
        from prefect.artifacts import create_markdown_artifact, create_table_artifact

        create_table_artifact(result.rows, key=artifact_key("eval", rt.run_id), description="held-out evaluation")
        create_markdown_artifact(text)
    except Exception:  # reporting never stops a flow
        pass
