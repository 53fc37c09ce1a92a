"""`flywheel eval`, `compare` and `export`: evaluations with intervals, and the way out.

- `eval` evaluates a policy (a run's current one, a given version, or the base model) on
  the held-out cells and the suites; every pass@1 with its 95% interval.
- `compare` reads two evaluations from the lake (two versions of a run, or of two runs)
  and gives the paired difference on the tasks both saw, per group, with a bootstrap
  interval, or says the difference is not resolvable.
- `export` writes a policy version as a standalone Hugging Face dir (weights, tokenizer,
  chat template) with a model card holding its evaluation table, which vLLM loads.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli import options
from flywheel.cli.common import (
    checked_config, lake_and_store, lake_flags, live_display, no_weights, pick_version, rich_table, run_config,
)  # fmt: skip
from flywheel.cli.errors import UsageProblem


def before_after(first, last):
    """A table: per group, pass@1 before and after with intervals, and the paired change."""
    change = {c["group"]: c for c in last.vs_base}
    before = {g["group"]: g for g in first.groups}
    rows = []
    for g in last.groups:
        b, c = before.get(g["group"]), change.get(g["group"])
        cell = lambda x: f"{x['pass@1']:.3f} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]" if x else "-"  # noqa: E731
        delta = "-"
        if c:
            delta = f"{100 * c['diff']:+.1f} [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]"
            delta += "" if c["resolvable"] else " not resolvable"
        rows.append((g["group"], g["n"], cell(b), cell(g), delta))
    title = f"held-out greedy pass@1, v{first.policy_version} -> v{last.policy_version} (95% intervals; change in points)"
    return rich_table(["group", "n", "before", "after", "change"], rows, title)


def eval_command(
    run_id: Optional[str] = options.run_id("Evaluate this run's policy (default: the base model)."),
    version: Optional[str] = typer.Option(None, help="A version of the run, or 'best' (default: its current one)."),
    model: Optional[str] = typer.Option(None, help="A local HF model dir (default: SmolLM2-135M-Instruct)."),
    tasks_per_level: Optional[int] = typer.Option(None, help="Held-out tasks per domain and level (eval.tasks_per_level)."),
    k: Optional[int] = typer.Option(None, help="pass@k samples per task at the training temperature (eval.k; 0: off)."),
    runs_dir: Optional[str] = options.runs_dir(),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' output here too."),
):
    """Held-out evaluation: greedy pass@1 with 95% intervals per cell, group and suite."""
    config = checked_config(config_file, set_, **{"model.path": model}, **lake_flags(run_id, runs_dir, store, s3_endpoint))
    from flywheel.flows.evaluate import evaluate

    with live_display(config, verbose) as reporter:
        result = evaluate(config, tasks_per_level=tasks_per_level, k=k, version=version)
        title = f"{result.run_id} policy v{result.policy_version}: greedy pass@1, 95% Wilson intervals ({result.wall_s:.0f} s)"
        ci = lambda r: f"{r['pass@1']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"  # noqa: E731
        reporter.print(rich_table(["group", "n", "solved", "pass@1 [95% CI]"],
                                  [(g["group"], g["n"], g["solved"], ci(g)) for g in result.groups], title))  # fmt: skip
        extra = [c for c in (result.rows[0] if result.rows else {}) if c.startswith("pass@") and c != "pass@1"]
        reporter.print(rich_table(["domain", "level", "n", "pass@1 [95% CI]", *extra, "mean reward"],
                                  [(r["domain"], r["level"], r["n"], ci(r), *[r[c] for c in extra], r["mean_reward"])
                                   for r in result.rows]))  # fmt: skip
        reporter.print(f"all columns: {config.run_dir / f'eval-v{result.policy_version}.md'}")
        for c in result.vs_base:
            sign = "" if c["resolvable"] else " (no resolvable difference)"
            reporter.print(f"{c['group']} vs v{result.base_version}: {100 * c['diff']:+.1f} points, 95% CI {100 * c['ci_low']:+.1f} to "
                           f"{100 * c['ci_high']:+.1f}, n={c['n']}{sign}")  # fmt: skip


def compare(
    run_id: str = options.run_id("The run whose evaluations to compare.", required=True),
    a: str = typer.Option("0", help="The first version (0: the starting policy)."),
    b: str = typer.Option("best", help="The second version: a number, 'best' or 'current'."),
    other_run: Optional[str] = typer.Option(None, help="Take version b from this run instead (same lake)."),
    runs_dir: Optional[str] = options.runs_dir(),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Paired difference of greedy pass@1 between two evaluated versions, per group."""
    from flywheel.reports import eval_report
    from flywheel.storage import evals

    cfg_a = run_config(run_id, runs_dir, store, s3_endpoint, config_file, set_)
    lake, store_a = lake_and_store(cfg_a)
    cfg_b = cfg_a.model_copy(update={"run_id": other_run}) if other_run else cfg_a
    _, store_b = lake_and_store(cfg_b)
    va, vb = pick_version(store_a, a, "--a"), pick_version(store_b, b, "--b")
    con_a, con_b = evals.connect(lake, cfg_a.run_id), evals.connect(lake, cfg_b.run_id)
    groups = lake.evaluation_groups(cfg_b.run_id, vb) or lake.evaluation_groups(cfg_a.run_id, va)
    rows = []
    for name, p in eval_report.compare(con_a, va, con_b, vb, groups):
        rows.append((name, p.n, f"{p.mean_a:.3f}", f"{p.mean_b:.3f}", p.describe()))
    if not rows:
        raise UsageProblem(f"no shared evaluated tasks between v{va} and v{vb}",
                           "`flywheel eval --run-id R --version N` evaluates a version")  # fmt: skip
    title = f"{cfg_a.run_id} v{va} vs {cfg_b.run_id} v{vb}: greedy pass@1, paired over the same tasks"
    import sys

    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 160).print(
        rich_table(["group", "n", f"v{va}", f"v{vb}", "difference"], rows, title)
    )


def export(
    run_id: str = options.run_id("The run to export from.", required=True),
    version: str = typer.Option("best", help="best, current, or a version number."),
    to: Path = typer.Option(..., "--to", help="A new dir for the Hugging Face model."),
    runs_dir: Optional[str] = options.runs_dir(),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """A policy version as a standalone HF dir (weights, tokenizer, chat template) with a
    model card of its evaluation; `vllm serve DIR` (or transformers) loads it."""
    from flywheel.run.model_prep import resolve_model

    config = run_config(run_id, runs_dir, store, s3_endpoint, config_file, set_)
    lake, policies = lake_and_store(config)
    v = pick_version(policies, version)
    base = resolve_model(config.model.path, config.model.cache_dir)
    src = policies.hf_dir(v) if v else base
    if src is None:
        raise UsageProblem(no_weights(policies, run_id, v))
    if to.is_file() or (to.exists() and any(to.iterdir())):
        raise UsageProblem(f"--to {to} exists and is not an empty dir", "give a new dir for the model")
    shutil.copytree(src, to, dirs_exist_ok=True)
    (to / "README.md").write_text(model_card_text(lake, run_id, v, base))
    typer.echo(f"exported {run_id} v{v} to {to}")


def model_card_text(lake, run_id: str, version: int, base: str) -> str:
    from flywheel.reports import eval_report
    from flywheel.storage import evals

    con = evals.connect(lake, run_id)
    groups = lake.evaluation_groups(run_id, version)
    cells = eval_report.cells(con, version)
    body = "No evaluation of this version was recorded.\n"
    if cells:
        comparisons = eval_report.compare(con, 0, con, version, groups) if version and lake.has_evaluation(run_id, 0, "greedy") else []
        body = eval_report.markdown(f"Evaluation of v{version}", cells, eval_report.groups(cells, groups), comparisons)
    return eval_report.model_card(run_id, version, Path(base).name, body)


def register_eval_commands(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command()(compare)
    app.command()(export)

