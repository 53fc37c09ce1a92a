"""`flywheel check`: is this config ready to run? Without starting a run.

One line per check, `ok` or `FAIL` with the reason: the config itself, the model, the
domains (task files parsed as the run parses them), the reward functions, the store
(reachable, or creatable where it is local: nothing is created) and the sandbox backend
(one worker starts and runs code; the task files' rows and the reward functions are then
validated in it, as the run does at start-up). Exit 2 when the config, or a file, model,
domain or function it names, is wrong; 1 when a resource (store, sandbox) is unavailable;
0 when all pass. A check that needs one that failed is skipped. Not checked: the engine
(vLLM starts only in a run) and GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli import options
from flywheel.cli.common import load_config
from flywheel.cli.errors import UsageProblem


class Checks:
    """The lines printed so far and the exit code they add up to."""

    def __init__(self):
        self.code = 0

    def ok(self, name: str, detail: str) -> None:
        typer.echo(f"ok    {name:<17} {detail}")

    def fail(self, name: str, reason: str, code: int) -> None:
        typer.secho(f"FAIL  {name:<17} {reason}", fg="red")
        self.code = max(self.code, code)  # a config problem (2) outranks an unavailable resource (1)


def check(config_file: Optional[Path] = options.config_file(), set_: list[str] = options.sets()):
    """Check a config, its model, domains, task files, reward functions, store and sandbox
    without starting a run (exit 2: the config is wrong; 1: a resource is unavailable)."""
    checks = Checks()
    try:
        config = load_config(config_file, set_).with_run_id()
    except UsageProblem as exc:
        checks.fail("config", exc.message, 2)
        raise typer.Exit(checks.code)
    checks.ok("config", str(config_file) if config_file else "the defaults")
    _model(checks, config)
    domains = _domains(checks, config)
    functions = _reward_functions(checks, config)
    _store(checks, config)
    _sandbox(checks, config, domains, functions)
    raise typer.Exit(checks.code)


def _model(checks: Checks, config) -> None:
    from flywheel.policy.lora import LoraTargetError
    from flywheel.run.model_prep import DEFAULT_NAME, ModelError, cache_root, resolve_model
    from flywheel.run.shipped_models import PROVENANCE, locate_parts, shipped_model

    shipped = not config.model.path
    if (
        shipped
        and not (cache_root(config.model.cache_dir) / "models" / DEFAULT_NAME / "config.json").is_file()
    ):
        checks.ok("model", f"the shipped {DEFAULT_NAME} (converted on the first run)")  # no conversion here
        return
    named = shipped_model(config.model.path) if config.model.path else None
    if named and not (cache_root(config.model.cache_dir) / "models" / named.dir_name / PROVENANCE).is_file():
        try:  # its parts at their pinned versions; the header and hash are checked when it is prepared
            locate_parts(named)
        except ModelError as exc:
            checks.fail("model", str(exc), 2)
            return
        checks.ok("model", f"{named.name}, its parts installed (prepared on the first run)")
        return
    lora = config.trainer.lora
    try:
        model_dir = resolve_model(config.model.path, config.model.cache_dir, log=lambda *_: None)
        if lora is not None:
            from flywheel.policy.lora import check_targets

            check_targets(model_dir, lora)
    except (ModelError, LoraTargetError) as exc:
        checks.fail("model", str(exc), 2)
        return
    checks.ok(
        "model",
        (f"the shipped {DEFAULT_NAME}" if shipped else model_dir) + (", LoRA targets in it" if lora else ""),
    )


def _domains(checks: Checks, config):
    from flywheel.environments.registry import DomainError
    from flywheel.run.domains import build_domains

    try:
        domains = build_domains(config)
    except DomainError as exc:
        checks.fail("domains", str(exc), 2)
        return None
    checks.ok("domains", ", ".join(env.name for env in domains))
    return domains


def _reward_functions(checks: Checks, config):
    from flywheel.environments.reward_functions import RewardFunctionError, load

    try:
        functions = load([f.spec() for f in config.reward.functions])
    except RewardFunctionError as exc:
        checks.fail("reward functions", str(exc), 2)
        return None
    if functions:
        checks.ok(
            "reward functions", ", ".join(f.name for f in functions) + " (imported in the sandbox below)"
        )
    return functions


def _store(checks: Checks, config) -> None:
    uri = config.lake_uri
    if uri.startswith("s3://"):
        problem = _s3_problem(uri, config.store.endpoint, config.store.region)
        if problem:
            checks.fail("store", problem, 1)
        else:
            checks.ok(
                "store", f"{uri} answers" + (f" at {config.store.endpoint}" if config.store.endpoint else "")
            )
        return
    path = Path(uri).absolute()
    if path.is_dir():
        checks.ok("store", f"{path} (a lake dir there)" if any(path.iterdir()) else str(path))
        return
    if path.exists():
        checks.fail("store", f"{path} is a file, not a lake dir", 2)
        return
    uri = str(path) if config.store.uri else f"{Path(config.runs_dir).absolute()}/<run id>/lake"
    parent = next(p for p in path.parents if p.exists())
    if not parent.is_dir():
        checks.fail("store", f"{uri}: {parent} is a file, not a dir", 2)
    elif not os.access(parent, os.W_OK | os.X_OK):
        checks.fail("store", f"{uri}: {parent} is not writable here", 1)
    else:
        checks.ok("store", f"{uri} (created by the run)")


def _s3_problem(uri: str, endpoint: str | None, region: str) -> str | None:
    """Why the S3 store does not answer, or None. Only reads: the run creates a missing
    bucket itself (storage/lake.py), and a typo'd bucket name must not be made here."""
    import pyarrow.fs as pafs
    from urllib.parse import urlparse

    kwargs: dict = {"region": region, "connect_timeout": 3, "request_timeout": 10}
    if endpoint:
        ep = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        kwargs.update(endpoint_override=ep.netloc, scheme=ep.scheme or "http")
    try:
        pafs.S3FileSystem(
            **kwargs, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1)
        ).get_file_info(urlparse(uri).netloc)
    except OSError as exc:
        code = next((w for w in str(exc).split() if w.isupper() and "_" in w), "no answer")
        return f"cannot reach {uri}" + (f" at {endpoint}" if endpoint else "") + f" ({code})"
    return None


def _sandbox(checks: Checks, config, domains, functions) -> None:
    from flywheel.environments.reward_functions import RewardFunctionError, probe
    from flywheel.environments.sandbox import Job, make_sandbox
    from flywheel.environments.base import ChecksTasks
    from flywheel.environments.sources.task_file import TaskFileError

    backend = config.sandbox.backend
    if backend == "docker":
        from flywheel.environments.sandbox.docker_backend import docker_unavailable

        why = docker_unavailable(config.sandbox.docker_hosts)
        if why:
            checks.fail("sandbox", f"docker: {why}", 1)
            return
    warmup = tuple(dict.fromkeys(e.sandbox_warmup for e in domains or () if e.sandbox_warmup))
    try:  # one worker is enough to know the backend works here
        sandbox = make_sandbox(config.sandbox.model_copy(update={"concurrency": 1}), warmup)
    except ValueError as exc:  # sandbox.libraries is not a dir
        checks.fail("sandbox", str(exc), 2)
        return
    except (RuntimeError, OSError) as exc:
        checks.fail("sandbox", f"{backend}: {exc}", 1)
        return
    try:
        res = sandbox.run(Job(["python", "-c", "print(6 * 7)"]))
        if res.error or res.stdout.strip() != "42":
            checks.fail(
                "sandbox", f"{backend} cannot run code here: {res.error or res.stderr.strip()[-300:]}", 1
            )
            return
        checks.ok("sandbox", f"{backend} runs code")
        try:
            if functions:
                probe(sandbox, functions)
        except RewardFunctionError as exc:
            checks.fail("reward functions", str(exc), 2)
        for env in domains or ():
            if isinstance(env, ChecksTasks):
                try:
                    env.validate(sandbox)
                    checks.ok("task file", f"{env.path}: {env.describe()}")
                except TaskFileError as exc:
                    checks.fail("task file", str(exc), 2)
    finally:
        sandbox.close()


def register_check_command(app: typer.Typer) -> None:
    app.command()(check)
