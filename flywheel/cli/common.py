"""What the CLI commands share: the config they run with (its file, `--set` and flags,
each mistake a UsageProblem naming the file, key or value; checked in seconds before
Prefect, vLLM and DeepSpeed start), the lake a reading command reads (only one that
exists: nothing is created), and the terminal they draw on. Not here: how errors are
shown and their exit codes (errors.py)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer
import yaml

from flywheel.cli.errors import UsageProblem, note_log
from flywheel.config import FlywheelConfig, apply_overrides

CONFIG_HINT = "`flywheel show-config --describe` lists every key with what it means"


def load_config(config_file: Optional[Path], overrides: list[str], **flags) -> FlywheelConfig:
    """The config from a YAML file (or the defaults), `--set` overrides and the command's
    flags (`store.uri=...`; None: not given); UsageProblem naming the file, key or value
    that is wrong."""
    try:
        config = FlywheelConfig.from_yaml(_config_file(config_file)) if config_file else FlywheelConfig()
    except ValueError as exc:
        raise UsageProblem(f"bad configuration: {config_file}: {_reason(exc)}", CONFIG_HINT) from None
    sets = list(overrides)
    for item in sets:
        _check_set(item)
    for key, value in flags.items():
        if value is not None:
            sets.append(f"{key}={json.dumps(value)}")
    try:
        return apply_overrides(config, sets)
    except ValueError as exc:
        raise UsageProblem(f"bad configuration: {_reason(exc)}", CONFIG_HINT) from None


def _config_file(path: Path) -> Path:
    """`path`, once it is a readable YAML mapping (what from_yaml would trip over with a traceback)."""
    if path.is_dir():
        raise UsageProblem(
            f"--config {path} is a directory", "give a YAML file: --config recipes/cpu-default.yaml"
        )
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UsageProblem(f"--config {path}: no such file") from None
    except OSError as exc:
        raise UsageProblem(f"--config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageProblem(f"--config {path} is not valid YAML: {_yaml_reason(exc)}") from None
    if not isinstance(data, (dict, type(None))):
        raise UsageProblem(f"--config {path} holds a {type(data).__name__}, not a mapping of config keys")
    return path


def _check_set(item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise UsageProblem(f"--set {item!r} is not key=value", "e.g. --set trainer.learning_rate=1e-5")
    try:
        yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise UsageProblem(
            f"--set {item}: the value is not valid YAML ({_yaml_reason(exc, lines=False)})",
            "quote the whole item for the shell: --set 'sampler.domains=[code, math]'",
        ) from None


def _yaml_reason(exc: yaml.YAMLError, lines: bool = True) -> str:
    problem = ": ".join(
        p for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p
    ) or str(exc)
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark and lines else problem


def _reason(exc: ValueError) -> str:
    """pydantic's many lines as one: `key: what is wrong (got value)` per error."""
    from pydantic import ValidationError

    # from_yaml re-raises a ValidationError as a ValueError naming the file: the original is its context
    found = exc if isinstance(exc, ValidationError) else exc.__context__
    if not isinstance(found, ValidationError):
        return str(exc)
    parts = []
    for e in found.errors()[:3]:
        got = e.get("input")
        shown = (
            f" (got {got!r})"
            if isinstance(got, (str, int, float, bool)) and e["type"] != "extra_forbidden"
            else ""
        )
        parts.append(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}{shown}")
    more = found.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def checked_config(config_file: Optional[Path], overrides: list[str], **flags) -> FlywheelConfig:
    """The config the command runs with (a fresh run id when none is given), once its
    model path, domains, reward functions and lake have passed the seconds-long checks."""
    config = load_config(config_file, overrides, **flags).with_run_id()
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
            note_log(None if verbose else config.run_dir / log_name)
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
    at fault, before Prefect, vLLM and DeepSpeed start. A store that does not answer is
    LakeError, which the error boundary reports (exit 1)."""
    from flywheel.environments.registry import DomainError
    from flywheel.environments.reward_functions import RewardFunctionError, load
    from flywheel.run.model_prep import ModelError
    from flywheel.run.domains import build_domains
    from flywheel.run.runtime import check_inputs
    from flywheel.policy.lora import LoraTargetError

    not_a_dir(config.lake_uri)
    try:
        check_inputs(config, say=typer.echo)
        build_domains(config)
        load([f.spec() for f in config.reward.functions])
    except (ModelError, DomainError, RewardFunctionError, LoraTargetError) as exc:
        raise UsageProblem(str(exc)) from None


def rich_table(names: list[str], rows, title: str | None = None):
    from rich.table import Table

    table = Table(title=title)
    for name in names:
        table.add_column(str(name))
    for row in rows:
        table.add_row(*[str(v) for v in row])
    return table


def run_config(
    run_id: str,
    runs_dir: str | None,
    store: str | None,
    s3_endpoint: str | None,
    config_file: Optional[Path] = None,
    overrides: list[str] = (),
) -> FlywheelConfig:
    """The config of an existing run (its lake: --store, else the config's store.uri,
    else the run's own under the runs dir)."""
    return load_config(config_file, list(overrides), **lake_flags(run_id, runs_dir, store, s3_endpoint))


def lake_flags(run_id, runs_dir, store, s3_endpoint) -> dict:
    """The lake flags (--run-id, --runs-dir, --store, --s3-endpoint) as the config keys they set."""
    return {"run_id": run_id, "runs_dir": runs_dir, "store.uri": store, "store.endpoint": s3_endpoint}


def not_a_dir(uri: str) -> None:
    """UsageProblem when a local lake's path is a file (the lake would fail to make its dir)."""
    if not uri.startswith("s3://") and Path(uri).is_file():
        raise UsageProblem(
            f"{uri} is a file, not a lake", "--store (store.uri) takes a dir or s3://bucket/prefix"
        )


def existing_lake(config: FlywheelConfig, of_the_run: bool = True):
    """The lake a reading command reads (store.uri, else the run's own under runs_dir), only
    if it is there and (`of_the_run`, given a run id) knows that run: a typo must be an
    error, not an empty answer and a new empty lake where it pointed."""
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    if not config.store.uri and not config.run_id:
        raise UsageProblem(
            "give --run-id (its lake under the runs dir) or --store (a dir or s3://bucket/prefix)"
        )
    uri = config.lake_uri
    not_a_dir(uri)
    if not uri.startswith("s3://") and not Path(uri).is_dir():
        if config.store.uri:
            raise UsageProblem(f"no lake at {uri}", "--store names a lake a run or `flywheel ingest` wrote")
        raise UsageProblem(
            f"no run {config.run_id} under {Path(config.runs_dir).absolute()} (no lake at {uri})",
            "check --run-id and --runs-dir; a run whose config set store.uri keeps its lake there: pass --store",
        )
    lake = Lake(uri, config.store.endpoint, config.store.region)
    run = config.run_id
    if of_the_run and run and config.store.uri and run not in lake.runs() and not lake.evaluation_files(run):
        if not PolicyStore(lake, run, config.run_dir / "policy-cache").manifest.get("versions"):
            raise UsageProblem(f"the lake at {uri} holds no run {run}",
                               f"runs there: {', '.join(lake.runs()) or 'none'}")  # fmt: skip
    return lake


def lake_and_store(config: FlywheelConfig):
    """The run's lake (which must exist: existing_lake) and its policy store."""
    from flywheel.storage.policies import PolicyStore

    lake = existing_lake(config)
    return lake, PolicyStore(lake, config.run_id, config.run_dir / "policy-cache")


def no_weights(policies, run_id: str, version: int) -> str:
    """Why policy `version` of `run_id` has no weights to hand: the run is not in this
    lake at all (its config set store.uri, so --store must say where), or it was pruned."""
    if not policies.manifest.get("versions"):
        return (f"run {run_id} has no policies in the lake at {policies.lake.root}: a run whose config set "
                "store.uri keeps them there (pass --store)")  # fmt: skip
    return f"policy v{version} of {run_id} has no weights left in the lake (pruned; pinned are: {policies.manifest.get('pinned', {})})"


def pick_version(store, spec: str, flag: str = "--version") -> int:
    """A version `spec` (a number, v<number>, 'best' or 'current') of the run `store` holds
    (storage/policies.py reads it), or a usage error naming the flag."""
    from flywheel.storage.policies import NoBestVersion

    try:
        return store.resolve(spec)
    except NoBestVersion:
        raise UsageProblem(f"{flag} best: no evaluation of this run recorded a best version",
                           "evaluate it (`flywheel eval`, or eval.every_n_cycles in a run) or give a number") from None  # fmt: skip
    except ValueError:
        raise UsageProblem(
            f"{flag} {spec}: not a version", "give a number (0: the starting policy), 'best' or 'current'"
        ) from None
