"""`flywheel ingest`: production logs into the lake (flows/ingest.py), with a report per file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flywheel.cli_common import live_display, load_config, rich_table


def ingest(
    paths: list[Path] = typer.Argument(..., help="JSONL / JSONL.gz / Parquet files or `datasets` dirs of logs."),
    workload: Optional[str] = typer.Option(None, help="Workload of records that name none (default: ingest.default_workload)."),
    store: Optional[str] = typer.Option(None, help="Lake root: a local dir or s3://bucket/prefix (default: store.uri)."),
    s3_endpoint: Optional[str] = typer.Option(None, help="S3 endpoint URL for an s3:// store."),
    config_file: Optional[Path] = typer.Option(None, "--config", help="A YAML config file."),
    set_: list[str] = typer.Option([], "--set", help="Override any config key: --set 'ingest.scrub_patterns={ticket: T-\\d+}'"),
):
    """Ingest production traces: scrubbed, deduplicated, exactly once; malformed records quarantined."""
    from flows.ingest import ingest as ingest_flow
    from flywheel.scrub import Scrubber

    try:
        config = load_config(config_file, set_, **{"store.uri": store, "store.endpoint": s3_endpoint})
        Scrubber(config.ingest.scrub_patterns, config.ingest.scrub_defaults)
    except (ValueError, FileNotFoundError) as exc:  # a bad scrub pattern is a ValueError too
        typer.secho(f"bad configuration: {exc}", fg="red", err=True)
        raise typer.Exit(2)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        typer.secho(f"no such file: {', '.join(missing)}", fg="red", err=True)
        raise typer.Exit(2)
    if not config.store.uri:
        typer.secho("give --store (a dir or s3://bucket/prefix) or store.uri: the lake the traces go to", fg="red", err=True)
        raise typer.Exit(2)
    with live_display() as reporter:
        reports = ingest_flow([str(p) for p in paths], config, workload)
        names = ["file", "records", "new", "duplicates", "quarantined", "redactions", "workloads", "seconds"]
        rows = [[r.row()[n] for n in names] for r in reports]
        reporter.print(rich_table(names, rows, title=f"traces ingested into {config.store.uri}"))
        for r in reports:
            if r.already_ingested:
                reporter.print(f"{r.file}: ingested before (batch {r.batch}); nothing added")
            for reason, n in sorted(r.reasons.items(), key=lambda kv: -kv[1]):
                reporter.print(f"  quarantined {n}: {reason}")


def register_trace_commands(app: typer.Typer) -> None:
    app.command()(ingest)
