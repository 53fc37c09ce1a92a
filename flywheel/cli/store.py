"""`flywheel store ...`: the lake's own commands (a local S3 server, compaction)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli import options
from flywheel.cli.common import existing_lake, lake_flags, load_config
from flywheel.cli.errors import UsageProblem

store_app = typer.Typer(no_args_is_help=True, help="The trajectory lake: a local S3 server, compaction.")


@store_app.command("serve")
def serve(
    data_dir: Path = typer.Option(Path("runs/s3"), help="Where SeaweedFS keeps the objects."),
    port: int = typer.Option(8333, help="S3 port on 127.0.0.1."),
    bucket: str = typer.Option("flywheel", help="Bucket to create."),
    access_key: str = typer.Option("flywheel"),
    secret_key: str = typer.Option("flywheel-secret"),
):
    """Run a local S3 server (SeaweedFS) until Ctrl-C, for a lake on S3 on one machine."""
    from flywheel.storage.seaweed import SeaweedServer

    server = SeaweedServer(data_dir, port, access_key, secret_key)
    try:
        server.start(bucket=bucket)
    except RuntimeError as exc:  # no weed binary, the port taken: it says which
        raise UsageProblem(str(exc)) from None
    exports = " ".join(f"{k}={v}" for k, v in server.env.items())
    typer.echo(f"S3 at {server.endpoint}, bucket {bucket!r}, data in {server.dir}\n"
               f"  export {exports}\n"
               f"  flywheel run --store s3://{bucket}/lake --s3-endpoint {server.endpoint}")  # fmt: skip
    def stop_on_sigterm(*_):  # a service manager's stop: leave no server behind
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    try:
        while server.proc.poll() is None:
            time.sleep(1)
        typer.secho("SeaweedFS exited; see weed.log in the data dir", fg="red", err=True)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@store_app.command("compact")
def compact_command(
    run_id: str = options.run_id("The run whose cycles to merge.", required=True),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    runs_dir: Optional[str] = options.runs_dir(),
    rows_per_file: int = typer.Option(1_000_000),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Merge a run's per-cycle files into large ones; no query's result changes."""
    from flywheel.storage.compact import compact

    lake = existing_lake(load_config(config_file, set_, **lake_flags(run_id, runs_dir, store, s3_endpoint)))
    done = compact(lake, run_id, rows_per_file)
    typer.echo(f"{done['cycles']} cycles: {done['files_before']} files -> {done['files_after']}")
