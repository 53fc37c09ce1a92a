"""Evaluation of a policy, with intervals: our held-out cells, and suites nobody here trained on.

What is evaluated (the same tasks every time, from a fixed seed, so versions compare):
- the held-out cells: `eval.tasks_per_level` eval-split tasks per domain and level of
  `sampler` (the domains trained on; their eval split is never sampled for training);
  a task file's held-out rows all, up to `eval.max_file_rows` per level;
- `eval.suites`: eval-only domains reported beside them, e.g. `humaneval` (164 problems
  nobody here wrote) and `code_transfer` (function families `code` never trains on),
  every task of a file suite, `eval.suite_tasks_per_level` per level of a generated one.
pass@1 is greedy (temperature 0, one sample), with its 95% Wilson interval per cell and
pooled per group; `eval.k` > 0 adds pass@k at the training temperature. Trajectories go
to the lake under `evaluations/` (storage/evals.py defines the metrics over them, and
storage/agentic.py the agentic ones of episode domains: completion with its interval,
pass@k and pass^k, turns and tokens per solved episode, call validity and accuracy, wall
time, why episodes failed), and a markdown report lands in the run dir.

`run_evaluation(rt)` is the body: the `evaluate` flow runs it on a Runtime of its own,
and the flywheel runs it inside the loop on the run's engine (flows/flywheel.py), where
it also keeps the best version (storage/policies.py) and can stop the run early.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger

from flywheel.environments.base import ListsTasks
from flywheel.environments.registry import expand, expand_all
from flywheel.reports import agentic_report, eval_report
from flywheel.config import FlywheelConfig
from flywheel.reports.progress_lines import lines_unless_shown
from flywheel.reports.summary import artifact_key
from flywheel.reports.results import EvalResult
from flywheel.run.runtime import Runtime
from flywheel.storage import evals
from flywheel.tasks.generate import generate
from flywheel.tasks.sample import quarantine_long_prompts, sampled_levels
from flywheel.tasks.score import score

EVAL_SEED = 20261130  # fixed: every evaluation sees the same held-out tasks


def eval_tasks(domains, sampler, per_level: int, max_file_rows: int = 0):
    """`per_level` held-out tasks per sampled domain and level, the same every time; a
    task file's held-out rows all, up to `max_file_rows` per level (0: `per_level` too).
    A file's held-out part is what its author set aside: cut to `per_level` (8 inside a
    run), a 20-row held-out part was reported on n=8 with an interval twice as wide."""
    tasks = []
    for name, levels in sampled_levels(domains, sampler).items():
        env = domains[name]
        count = max(per_level, max_file_rows) if isinstance(env, ListsTasks) else per_level
        for level in levels:
            tasks += env.make_tasks("eval", level, EVAL_SEED, count)
    return tasks


def suite_tasks(env, per_level: int):
    """A suite's tasks: every row of a file, else `per_level` per level."""
    if isinstance(env, ListsTasks):
        return env.all_tasks("eval")
    return [t for level in env.levels for t in env.make_tasks("eval", level, EVAL_SEED, per_level)]


def eval_groups(config: FlywheelConfig, domains, suites: list[str] | None = None) -> dict[str, list[str]]:
    """Report groups: "held-out" (the sampled domains) and each suite on its own."""
    held = [domains[s].name for s in expand_all(config.sampler.domains)]
    suites = config.eval.suites if suites is None else suites
    out = {"held-out": held}
    for spec in suites:  # a glob (rg/games/*) is one group of the domains it selects
        names = [domains[s].name for s in expand(spec)]
        out[names[0] if names == [spec] else spec] = names
    return out


def run_evaluation(rt: Runtime, tasks_per_level: int | None = None, k: int | None = None,
                   suites: list[str] | None = None) -> EvalResult:  # fmt: skip
    """Evaluate the policy the engine holds (the run's current version); already-written
    evaluations of that version are read back, not redone (a resumed run)."""
    cfg = rt.config
    per_level = tasks_per_level or cfg.eval.tasks_per_level
    k = cfg.eval.k if k is None else k
    suites = cfg.eval.suites if suites is None else suites
    t0 = time.monotonic()
    version = rt.engine_version
    tasks = eval_tasks(rt.domains, cfg.sampler, per_level, cfg.eval.max_file_rows)
    for spec in expand_all(suites):
        tasks += suite_tasks(rt.domains[spec], cfg.eval.suite_tasks_per_level)
    # a prompt with no room to answer is set aside, as in training (the same ones for every
    # version, so comparisons stay paired)
    budget = cfg.engine.max_model_len - cfg.generation.max_tokens
    tasks = quarantine_long_prompts(
        tasks, rt.tokenizer, budget, rt.run_dir / "quarantine" / f"eval-v{version}.jsonl"
    )
    modes = [("greedy", cfg.generation.model_copy(update={"k": 1, "temperature": 0.0}))]
    if k:
        modes.append(("sampled", cfg.generation.model_copy(update={"k": k})))
    for mode, generation in modes:
        if rt.lake.has_evaluation(rt.run_id, version, mode, len(tasks) * generation.k):
            continue
        ctx = rt.stage_context(-1, f"eval-{mode}", generation)
        rollouts = generate.with_options(task_run_name=f"eval-generate-{mode}")(rt, ctx, tasks)
        trajectories = score.with_options(task_run_name=f"eval-score-{mode}")(rt, ctx, rollouts)
        rt.lake.write_evaluation(rt.run_id, version, mode, trajectories)
    by_group = eval_groups(cfg, rt.domains, suites)
    rt.lake.write_evaluation_groups(rt.run_id, version, by_group)
    con = evals.connect(rt.lake, rt.run_id)
    cells = eval_report.cells(con, version, k)
    groups = eval_report.groups(cells, by_group)
    agentic = agentic_report.evaluation_rows(con, version)  # episode domains' metrics (none without)
    comparisons = []  # against the run's first evaluated version: v0, or v1 after a cold start
    [(first,)] = con.execute("SELECT min(policy_version) FROM eval_cells WHERE mode = 'greedy'").fetchall()
    if first is not None and first < version:
        comparisons = eval_report.compare(con, first, con, version, by_group)
    result = EvalResult(run_id=rt.run_id, policy_version=version, rows=cells, groups=groups,
                        vs_base=[{"group": g, **p.as_dict()} for g, p in comparisons],
                        base_version=first if comparisons else None, agentic=agentic,
                        k=k, wall_s=round(time.monotonic() - t0, 1))  # fmt: skip
    _report(rt, result, comparisons)
    return result


def evaluate_and_track(rt: Runtime) -> tuple[EvalResult, bool]:
    """Inside the loop: evaluate the engine's policy, note it against the best version
    (kept, never pruned), redraw the curve; True when `eval.patience` says stop."""
    cfg = rt.config.eval
    suites = rt.config.eval.suites if cfg.in_run_suites else []
    result = run_evaluation(rt, cfg.in_run_tasks_per_level, suites=suites)
    value = result.metric(cfg.metric)
    stop = False
    if value is not None:
        best = rt.policies.record_evaluation(result.policy_version, cfg.metric, value)
        stop = cfg.patience > 0 and best["stale"] >= cfg.patience
    from flywheel.reports.summary import publish_eval_curve

    publish_eval_curve(rt, eval_groups(rt.config, rt.domains, suites))
    return result, stop


def _eval_run_name() -> str:
    from prefect.runtime import flow_run

    config = flow_run.parameters.get("config")
    run_id = config.get("run_id") if isinstance(config, dict) else getattr(config, "run_id", "")
    return f"evaluate-{run_id or 'base'}"


@flow(name="evaluate", flow_run_name=_eval_run_name)
def evaluate(config: FlywheelConfig = FlywheelConfig(), tasks_per_level: int | None = None,
             k: int | None = None, version: str | None = None) -> EvalResult:  # fmt: skip
    """Evaluate policy `version` of `config.run_id` (a number, "best", or by default the
    current one; the base model for a new run)."""
    logger = get_run_logger()
    config = config.with_run_id()
    rt = Runtime(config, say=logger.info)
    try:
        if version is not None:
            wanted = rt.policies.resolve(version)
            if wanted != rt.engine_version:
                rt.load_policy_into_engine(wanted)
        with lines_unless_shown():  # a worker's or notebook's run: stage lines on its stdout
            return run_evaluation(rt, tasks_per_level, k)
    finally:
        rt.close()


def _report(rt, result: EvalResult, comparisons) -> None:
    title = f"Evaluation of {result.run_id}, policy v{result.policy_version}"
    text = eval_report.markdown(title, result.rows, result.groups, comparisons, result.wall_s, result.agentic)
    (rt.run_dir / f"eval-v{result.policy_version}.md").write_text(text)
    try:
        from prefect.artifacts import create_markdown_artifact, create_table_artifact

        create_table_artifact(
            result.rows, key=artifact_key("eval", rt.run_id), description="held-out evaluation"
        )
        if result.agentic:
            create_table_artifact(result.agentic, key=artifact_key("eval-agentic", rt.run_id),
                                  description="agentic metrics of the episode domains")  # fmt: skip
        create_markdown_artifact(text)
    except Exception:  # reporting never stops a flow
        pass
