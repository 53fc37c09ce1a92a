"""Production in and out: `flywheel ingest` (logs into the lake, flows/ingest.py, a report
per file) and `flywheel deploy` (the best policy into serving vLLM servers through an
evaluation gate, flywheel/production/deploy.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli.common import lake_and_store, live_display, load_config, no_weights, pick_version, rich_table, run_config


def ingest(
    paths: list[Path] = typer.Argument(..., help="JSONL / JSONL.gz / Parquet files, `datasets` dirs, or drop dirs of log files."),
    workload: Optional[str] = typer.Option(None, help="Workload of records that name none (default: ingest.default_workload)."),
    store: Optional[str] = typer.Option(None, help="Lake root: a local dir or s3://bucket/prefix (default: store.uri)."),
    run_id: Optional[str] = typer.Option(
        None, help="The run whose lake the traces go to (runs/<run id>/lake), when no --store or store.uri names one."
    ),
    s3_endpoint: Optional[str] = typer.Option(None, help="S3 endpoint URL for an s3:// store."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="A YAML config file."),
    set_: list[str] = typer.Option([], "--set", help="Override any config key: --set 'ingest.scrub_patterns={ticket: T-\\d+}'"),
):
    """Ingest production traces: scrubbed, deduplicated, exactly once; malformed records quarantined."""
    from flywheel.flows.ingest import ingest as ingest_flow
    from flywheel.production.scrub import Scrubber

    try:
        config = load_config(config_file, set_, **{"store.uri": store, "store.endpoint": s3_endpoint, "run_id": run_id})
        Scrubber(config.ingest.scrub_patterns, config.ingest.scrub_defaults)
    except (ValueError, FileNotFoundError) as exc:  # a bad scrub pattern is a ValueError too
        typer.secho(f"bad configuration: {exc}", fg="red", err=True)
        raise typer.Exit(2)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        typer.secho(f"no such file: {', '.join(missing)}", fg="red", err=True)
        raise typer.Exit(2)
    if not config.store.uri and not run_id:
        typer.secho(
            "give --run-id (the run's own lake), --store (a dir or s3://bucket/prefix) or store.uri: the lake the "
            "traces go to", fg="red", err=True,
        )  # fmt: skip
        raise typer.Exit(2)
    lake = config.lake_uri  # store.uri, else the run's lake (the one `flywheel run --run-id` reads)
    with live_display() as reporter:
        reports = ingest_flow([str(p) for p in paths], config, workload, store=lake)
        names = ["file", "records", "new", "duplicates", "quarantined", "redactions", "workloads", "seconds"]
        rows = [[r.row()[n] for n in names] for r in reports]
        reporter.print(rich_table(names, rows, title=f"traces ingested into {lake}"))
        for r in reports:
            if r.already_ingested:
                reporter.print(f"{r.file}: ingested before (batch {r.batch}); nothing added")
            for reason, n in sorted(r.reasons.items(), key=lambda kv: -kv[1]):
                reporter.print(f"  quarantined {n}: {reason}")


def deploy(
    run_id: str = typer.Option(..., help="The run whose policy to deploy."),
    to: list[str] = typer.Option(..., "--to", help="A vLLM server (`flywheel engine serve`) URL; repeat or comma-separate."),
    version: str = typer.Option("best", help="best, current, or a version number."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the gate's decision; push nothing."),
    runs_dir: str = typer.Option("runs"),
    store: Optional[str] = typer.Option(None, help="The lake, when not the run's own."),
    s3_endpoint: Optional[str] = typer.Option(None, help="S3 endpoint URL for an s3:// store."),
):
    """Push a policy into running vLLM servers, only if its held-out and per-workload
    evaluations are not resolvably worse than the serving policy's; recorded in the lake."""
    from rich.console import Console

    from flywheel.production.deploy import DeployRefused, deploy as deploy_policy, gate
    from flywheel.run.model_prep import resolve_model
    from flywheel.storage.deployments import Deployments

    urls = [u.strip() for item in to for u in item.split(",") if u.strip()]
    config = run_config(run_id, runs_dir, store, s3_endpoint)
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
        typer.secho(no_weights(policies, run_id, v), fg="red", err=True)
        raise typer.Exit(2)
    try:
        g = deploy_policy(lake, run_id, v, hf, urls, config.engine)
    except DeployRefused as exc:
        typer.secho(f"refused: {exc}; the servers keep the policy they serve", fg="red", err=True)
        raise typer.Exit(2)
    except Exception as exc:  # a server down or refusing weights: its URL is in the message
        typer.secho(f"deploy failed: {exc}", fg="red", err=True)
        raise typer.Exit(1)
    show(g)
    typer.echo(f"deployed {run_id} v{v} to {', '.join(urls)}")


def register_production_commands(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(deploy)
