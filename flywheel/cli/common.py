"""What the CLI commands share: the config they run with (checked in seconds, before
Prefect, vLLM and DeepSpeed start), and the terminal they draw on."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer

from flywheel.config import FlywheelConfig, apply_overrides


def load_config(config_file: Optional[Path], overrides: list[str], **flags) -> FlywheelConfig:
    config = FlywheelConfig.from_yaml(config_file) if config_file else FlywheelConfig()
    sets = list(overrides)
    for key, value in flags.items():
        if value is not None:
            sets.append(f"{key}={json.dumps(value)}")
    return apply_overrides(config, sets)


def valid_config(config_file: Optional[Path], overrides: list[str], **flags) -> FlywheelConfig:
    """The config, or exit 2 naming what is wrong with it (file, key, value)."""
    try:
        return load_config(config_file, overrides, **flags)
    except (ValueError, FileNotFoundError) as exc:
        typer.secho(f"bad configuration: {exc}", fg="red", err=True)
        raise typer.Exit(2)


def checked_config(config_file: Optional[Path], overrides: list[str], **flags) -> FlywheelConfig:
    """The config the command runs with (a fresh run id when none is given), or exit 2
    naming what is wrong with it, its model path or its lake."""
    config = valid_config(config_file, overrides, **flags).with_run_id()
    preflight(config)
    return config


@contextlib.contextmanager
def live_display(config: FlywheelConfig | None = None, verbose: bool = False, log_name: str = "log.txt"):
    """The stages' progress bars and the summaries on the terminal; with a config, the
    libraries' output goes to <run dir>/<log_name> (unless `verbose`) and Ctrl-C or
    SIGTERM stop the run cleanly (flywheel/run/console.py)."""
    from flywheel.run.console import run_console
    from flywheel.reports.progress import reporter as current_reporter
    from flywheel.reports.progress import set_reporter
    from flywheel.reports.progress_lines import display_reporter

    with contextlib.ExitStack() as stack:
        terminal = None
        if config is not None:
            terminal = stack.enter_context(run_console(config.run_dir / log_name, verbose))
        before = current_reporter()
        reporter = display_reporter(terminal)  # bars on a terminal, flushed lines on a pipe or file
        set_reporter(reporter)
        try:
            yield reporter
        finally:
            reporter.stop()
            set_reporter(before)  # a later flow in this process (a notebook, tests) must not write here


def preflight(config: FlywheelConfig) -> None:
    """Fail in seconds, naming the model path, lake, domain, task file or reward function
    at fault, before Prefect, vLLM and DeepSpeed start."""
    from flywheel.environments.registry import DomainError
    from flywheel.environments.reward_functions import RewardFunctionError, load
    from flywheel.run.model_prep import ModelError
    from flywheel.run.domains import build_domains
    from flywheel.run.runtime import check_inputs
    from flywheel.policy.lora import LoraTargetError
    from flywheel.storage.lake import LakeError

    try:
        check_inputs(config, say=typer.echo)
        build_domains(config)
        load([f.spec() for f in config.reward.functions])
    except (ModelError, LakeError, DomainError, RewardFunctionError, LoraTargetError) as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2)


def rich_table(names: list[str], rows, title: str | None = None):
    from rich.table import Table

    table = Table(title=title)
    for name in names:
        table.add_column(str(name))
    for row in rows:
        table.add_row(*[str(v) for v in row])
    return table


def run_config(run_id: str, runs_dir: str, store: str | None, s3_endpoint: str | None):
    """The config of an existing run (its lake: --store, else under the runs dir)."""
    sets = [f"run_id={run_id}", f"runs_dir={runs_dir}"]
    sets += [f"store.uri={store}"] if store else []
    sets += [f"store.endpoint={s3_endpoint}"] if s3_endpoint else []
    return load_config(None, sets)


def lake_and_store(config):
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    lake = Lake(config.lake_uri, config.store.endpoint, config.store.region)
    return lake, PolicyStore(lake, config.run_id, config.run_dir / "policy-cache")


def no_weights(policies, run_id: str, version: int) -> str:
    """Why policy `version` of `run_id` has no weights to hand: the run is not in this
    lake at all (its config set store.uri, so --store must say where), or it was pruned."""
    if not policies.manifest.get("versions"):
        return (f"run {run_id} has no policies in the lake at {policies.lake.root}: a run whose config set "
                "store.uri keeps them there (pass --store)")  # fmt: skip
    return f"policy v{version} of {run_id} has no weights left in the lake (pruned; pinned are: {policies.manifest.get('pinned', {})})"


def pick_version(store, spec: str) -> int:
    if spec == "best":
        if store.best_version is None:
            raise typer.BadParameter(
                "no evaluation of this run recorded a best version (eval.every_n_cycles)"
            )
        return store.best_version
    return store.version if spec == "current" else int(spec.lstrip("v"))
