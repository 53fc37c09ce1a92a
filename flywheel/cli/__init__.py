"""`flywheel`: the command line face of the same flows the Prefect UI runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

import flywheel

flywheel.use_offline_defaults()  # the CLI is a program: its process (and children) run offline
from flywheel.cli import options
from flywheel.cli.check import register_check_command
from flywheel.cli.common import checked_config, lake_flags, live_display, load_config
from flywheel.cli.errors import FlywheelGroup, UsageProblem
from flywheel.cli.eval import register_eval_commands
from flywheel.cli.gateway import gateway_app
from flywheel.cli.query import register_query_commands
from flywheel.cli.show_config import register_show_config_command
from flywheel.cli.store import store_app
from flywheel.cli.production import register_production_commands

# Every command runs inside one error boundary (FlywheelGroup, flywheel/cli/errors.py): a
# user's mistake is a line or two and exit 2, failed work exit 1. A bug's traceback is
# long enough without every local variable (an S3 key among them): none are shown.
app = typer.Typer(cls=FlywheelGroup, add_completion=False, no_args_is_help=True, help=__doc__,
                  pretty_exceptions_show_locals=False)  # fmt: skip
app.add_typer(store_app, name="store")
app.add_typer(gateway_app, name="gateway")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"flywheel {version(flywheel.DISTRIBUTION)}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("flywheel (not installed)")
        raise typer.Exit()


@app.callback()
def main(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the installed version and exit."
    ),
):
    """`flywheel`: the command line face of the same flows the Prefect UI runs."""


@app.command()
def run(
    cycles: Optional[int] = typer.Option(None, help="Cycles to run (in total, for a resumed run)."),
    model: Optional[str] = typer.Option(
        None, help="A local HF model dir or a cached Hub name org/name (default: SmolLM2-135M-Instruct)."
    ),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    run_id: Optional[str] = options.run_id(
        "Resume this run, or start a new one of this name (default: a new run)."
    ),
    runs_dir: Optional[str] = options.runs_dir(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
    verbose: bool = typer.Option(
        False, "--verbose", help="Show vLLM, DeepSpeed and Prefect output here too."
    ),
):
    """Run the flywheel on the embedded default (or what the flags say)."""
    config = checked_config(config_file, set_, **{"cycles": cycles, "model.path": model},
                            **lake_flags(run_id, runs_dir, store, s3_endpoint))  # fmt: skip
    from flywheel.flows.flywheel import flywheel as flywheel_flow
    from flywheel.cli.eval import before_after

    with live_display(config, verbose) as reporter:
        reporter.print(f"[bold]flywheel[/] run [cyan]{config.run_id}[/] -> {config.run_dir} "
                       f"(library output in {config.run_dir / 'log.txt'})")  # fmt: skip
        result = flywheel_flow(config)
        total = sum(c.stage_s.get("cycle", 0.0) for c in result.cycles)
        if len(result.evaluations) >= 2:
            reporter.print(before_after(result.evaluations[0], result.evaluations[-1]))
        reporter.print(
            f"done: {len(result.cycles)} cycles, {total:.0f}s in stages; summaries in "
            f"{config.run_dir / 'cycles.jsonl'}, curves in {config.run_dir}/reward_curve.png and eval_curve.png"
        )


@app.command()
def sft(
    run_id: str = options.run_id(
        "The run to fine-tune (new or existing); RL resumes from the result.", required=True
    ),
    data: Optional[str] = typer.Option(
        None, help="A JSONL/Parquet file of {'messages': [...]} demonstrations."
    ),
    references: int = typer.Option(
        0, help="Else: this many reference replies per domain and level of sampler."
    ),
    epochs: int = typer.Option(1),
    batch_size: int = typer.Option(16),
    learning_rate: float = typer.Option(1e-5),
    max_minutes: float = typer.Option(
        0.0, help="Stop training after this many minutes (0: run every epoch)."
    ),
    runs_dir: Optional[str] = options.runs_dir(),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' output here too."),
):
    """SFT cold start: demonstrations (a file, the domains' references, else the run's own
    passing trajectories) become the run's next policy version."""
    config = checked_config(config_file, set_, **lake_flags(run_id, runs_dir, store, s3_endpoint))
    from flywheel.flows.sft import sft as sft_flow

    with live_display(config, verbose) as reporter:
        result = sft_flow(config, data_path=data, references=references, epochs=epochs, batch_size=batch_size,
                          learning_rate=learning_rate, max_minutes=max_minutes)  # fmt: skip
        reporter.print(json.dumps(result))


register_eval_commands(app)
register_production_commands(app)
register_query_commands(app)
register_check_command(app)
register_show_config_command(app)


@app.command()
def server(
    port: int = typer.Option(4200, help="Port of the Prefect server and UI."),
    worker: bool = typer.Option(True, help="Also run a worker in the foreground."),
):
    """From zero to the UI: start a Prefect server, create the pool, deploy, run a worker."""
    from flywheel.cli.prefect_server import up

    up(port=port, worker=worker, say=typer.echo)


@app.command()
def domains(
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="Override a config key, repeatable (sampler.domains, eval.files, "
        "run_id or store.uri for traces: domains).",
    ),
):
    """Every domain found: built in, installed plug-ins (the `flywheel.domains` entry
    points) and the config's own (task files, module:Class), with kind, levels and source."""
    from flywheel.environments.registry import available

    config = load_config(config_file, set_)
    from flywheel.config.production import trace_source

    infos = available(config.sampler.domains, config.eval.files, trace_source(config))
    rows = [("domain", "kind", "levels", "source", "notes")]
    rows += [(i.name, i.kind, ",".join(map(str, i.levels)) or "-", i.source, i.notes) for i in infos]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]  # plain columns: names are never cut
    for r in rows:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[4])


@app.command("prepare-model")
def prepare_model(
    name: Optional[str] = typer.Argument(
        None,
        help="A shipped model: qwen2.5-coder-0.5b or qwen2.5-coder-1.5b (their extras installed). "
        "Empty: the default SmolLM2.",
    ),
    cache_dir: Optional[str] = typer.Option(None, help="Where to keep converted models."),
):
    """Convert a shipped GGUF into an HF dir in the model store and print its path (done
    automatically on first use). The Qwen models' parts are checked first: pinned versions,
    GGUF header, sha256."""
    from flywheel.run.model_prep import ModelError, resolve_model
    from flywheel.run.shipped_models import SHIPPED

    if name and name.lower() not in SHIPPED:
        raise UsageProblem(f"prepare-model {name}: not a shipped model", f"one of: {', '.join(SHIPPED)}")
    try:
        typer.echo(resolve_model(name, cache_dir))
    except ModelError as exc:
        raise UsageProblem(str(exc)) from None


sandbox_app = typer.Typer(add_completion=False, no_args_is_help=True, help="The code sandbox's tools.")
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("build-image")
def sandbox_build_image(
    image: Optional[str] = typer.Option(None, help="Image name (default: sandbox.docker_image)."),
    python: Optional[str] = typer.Option(None, help="System python to copy in (default: sandbox.python)."),
    host: list[str] = typer.Option(
        [], "--host", help="A docker endpoint (repeatable; default: sandbox.docker_hosts, else DOCKER_HOST)."
    ),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Build the docker sandbox image locally (no registry) from this machine's system python
    and sandbox.libraries, on every configured docker host."""
    from flywheel.environments.sandbox import libraries_dir
    from flywheel.environments.sandbox.docker_backend import docker_unavailable
    from flywheel.environments.sandbox.docker_image import build_image

    config = load_config(config_file, set_)
    try:
        libraries = libraries_dir(config.sandbox)
    except ValueError as exc:  # sandbox.libraries is not a dir
        raise UsageProblem(str(exc)) from None
    hosts = host or config.sandbox.docker_hosts or [""]
    down = {h: why for h in hosts if (why := docker_unavailable([h]))}
    name = image or config.sandbox.docker_image
    if len(down) < len(hosts):
        up = [h for h in hosts if h not in down]
        ids = build_image(
            name, python or config.sandbox.python, say=typer.echo, hosts=up, libraries=libraries
        )
        for h, image_id in ids.items():
            typer.echo(f"built {name} on {h or 'DOCKER_HOST'} ({image_id})")
    for why in down.values():
        typer.secho(why, fg="red", err=True)
    if down:  # the others have the image; these need it when they come back (an engine not answering: exit 1)
        raise typer.Exit(1)


engine_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Rollout engines.")
app.add_typer(engine_app, name="engine")


@engine_app.command("serve")
def engine_serve(
    model: str = typer.Option(..., help="The HF model dir to serve (the run's base model)."),
    port: int = typer.Option(8000),
    host: str = typer.Option(
        "127.0.0.1", help="Bind address; its dev endpoints take weights: keep it private."
    ),
    max_model_len: int = typer.Option(1024),
    dtype: str = typer.Option("float32"),
):
    """Run a vLLM server for `engine.backend=openai` until Ctrl-C (weight pushes enabled)."""
    import signal
    import time

    from flywheel.policy.engines.vllm_server import VLLMServer

    server = VLLMServer(model, port, host, max_model_len=max_model_len, dtype=dtype)
    typer.echo(f"starting vLLM on {server.url} (log {server.log_path}) ...")

    def stop_on_sigterm(*_):  # a service manager's stop: leave no server behind
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    try:
        server.start()
        typer.echo(f"serving: flywheel run --set engine.backend=openai --set engine.base_urls={server.url}")
        while server.proc.poll() is None:
            time.sleep(1)
        typer.secho(f"the server exited; see {server.log_path}", fg="red", err=True)
        raise typer.Exit(1)
    except RuntimeError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    app()
