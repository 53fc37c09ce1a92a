"""Production in and out: `flywheel ingest` (logs into the lake, flows/ingest.py, a report
per file) and `flywheel deploy` (the best policy into serving vLLM servers through an
evaluation gate, flywheel/production/deploy.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli import options
from flywheel.cli.common import (
    lake_and_store, lake_flags, live_display, load_config, no_weights, not_a_dir, pick_version, rich_table, run_config,
)  # fmt: skip
from flywheel.cli.errors import UsageProblem, WorkFailed


def ingest(
    paths: list[Path] = typer.Argument(..., help="JSONL / JSONL.gz / Parquet files, `datasets` dirs, or drop dirs of log files."),
    workload: Optional[str] = typer.Option(None, help="Workload of records that name none (default: ingest.default_workload)."),
    store: Optional[str] = options.store(),
    run_id: Optional[str] = options.run_id("The run whose lake the traces go to (<runs dir>/<run id>/lake), "
                                           "when no --store or store.uri names one."),  # fmt: skip
    runs_dir: Optional[str] = options.runs_dir(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = typer.Option([], "--set", help="Override a config key, repeatable: --set 'ingest.scrub_patterns={ticket: T-\\d+}'"),
):
    """Ingest production traces: scrubbed, deduplicated, exactly once; malformed records quarantined."""
    from flywheel.flows.ingest import LOG_SUFFIXES, ingest as ingest_flow
    from flywheel.production.scrub import Scrubber
    from flywheel.storage.lake import Lake

    config = load_config(config_file, set_, **lake_flags(run_id, runs_dir, store, s3_endpoint))
    try:
        Scrubber(config.ingest.scrub_patterns, config.ingest.scrub_defaults)
    except ValueError as exc:  # a pattern that is no regular expression
        raise UsageProblem(f"bad configuration: {exc}") from None
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageProblem(f"no such file: {', '.join(missing)}")
    unread = [str(p) for p in paths if p.is_file() and not p.name.endswith(LOG_SUFFIXES)]
    if unread:  # what the flow would stop at, after starting Prefect and making the lake
        raise UsageProblem(f"not a log file ingest reads: {', '.join(unread)}",
                           f"give {', '.join(LOG_SUFFIXES)} files, a `datasets` dir, or a dir of such files")  # fmt: skip
    if not config.store.uri and not run_id:
        raise UsageProblem("give --run-id (the run's own lake), --store (a dir or s3://bucket/prefix) or store.uri: "
                           "the lake the traces go to")  # fmt: skip
    lake = config.lake_uri  # store.uri, else the run's lake (the one `flywheel run --run-id` reads)
    not_a_dir(lake)
    Lake(lake, config.store.endpoint, config.store.region)  # an S3 store that does not answer: said now, not in the flow
    # With no Prefect server configured, the flow's body runs without one: starting a
    # temporary server costs ~13 s, and ingest has no task runs to show. A configured
    # server (PREFECT_API_URL) gets the flow run, as from the UI.
    from prefect.settings import PREFECT_API_URL

    run = ingest_flow if PREFECT_API_URL.value() else ingest_flow.fn
    with live_display() as reporter:
        reports = run([str(p) for p in paths], config, workload, store=lake)
        names = ["file", "records", "new", "duplicates", "quarantined", "redactions", "workloads", "seconds"]
        rows = [[r.row()[n] for n in names] for r in reports]
        reporter.print(rich_table(names, rows, title=f"traces ingested into {lake}"))
        for r in reports:
            if r.already_ingested:
                reporter.print(f"{r.file}: ingested before (batch {r.batch}); nothing added")
            for reason, n in sorted(r.reasons.items(), key=lambda kv: -kv[1]):
                reporter.print(f"  quarantined {n}: {reason}")


def deploy(
    run_id: str = options.run_id("The run whose policy to deploy.", required=True),
    to: list[str] = typer.Option(..., "--to", help="A vLLM server (`flywheel engine serve`) URL; repeat or comma-separate."),
    version: str = typer.Option("best", help="best, current, or a version number."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the gate's decision; push nothing."),
    runs_dir: Optional[str] = options.runs_dir(),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Push a policy into running vLLM servers, only if its held-out and per-workload
    evaluations are not resolvably worse than the serving policy's; recorded in the lake."""
    from rich.console import Console

    from flywheel.production.deploy import DeployRefused, deploy as deploy_policy, gate
    from flywheel.run.model_prep import resolve_model
    from flywheel.storage.deployments import Deployments

    urls = [u.strip() for item in to for u in item.split(",") if u.strip()]
    config = run_config(run_id, runs_dir, store, s3_endpoint, config_file, set_)
    lake, policies = lake_and_store(config)
    v = pick_version(policies, version)
    console = Console(width=None if sys.stdout.isatty() else 160)

    def show(g) -> None:
        rows = [(r["group"], r["n"], f"{r['a']:.3f}", f"{r['b']:.3f}", r["difference"]) for r in g.rows]
        title = f"gate: {g.candidate[0]} v{g.candidate[1]} against serving {g.serving[0]} v{g.serving[1]}"
        console.print(rich_table(["group", "n", "serving", "candidate", "difference"], rows, title))

    if dry_run:
        g = gate(lake, run_id, v, Deployments(lake).serving() or (run_id, 0))
        show(g)
        typer.echo("gate: passes" if g.passed else f"gate: refuses: {g.reason}")
        raise typer.Exit(0 if g.passed else 2)
    hf = policies.hf_dir(v) if v else resolve_model(config.model.path, config.model.cache_dir)
    if hf is None:
        raise UsageProblem(no_weights(policies, run_id, v))
    try:
        g = deploy_policy(lake, run_id, v, hf, urls, config.engine)
    except DeployRefused as exc:
        raise UsageProblem(f"refused: {exc}; the servers keep the policy they serve") from None
    except Exception as exc:  # a server down or refusing weights: its URL is in the message
        raise WorkFailed(f"deploy failed: {exc}") from None
    show(g)
    typer.echo(f"deployed {run_id} v{v} to {', '.join(urls)}")


def register_production_commands(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(deploy)
