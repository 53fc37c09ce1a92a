"""Sandbox backends, chosen by `sandbox.backend` in the config. One file per backend:
bwrap.py (the default), docker_backend.py, process.py (UNSAFE, development only);
worker.py (with worker_startup.py, worker_workspace.py, worker_child.py: one program) runs
inside the bwrap and docker sandboxes; pool.py and protocol.py are their shared host side,
docker_image.py builds the docker image and docker_hosts.py watches several engines."""

from __future__ import annotations

from dataclasses import fields

from flywheel.environments.sandbox.base import ExecResult, Job, Limits, Sandbox, Workspace

BACKENDS = {
    "bwrap": "flywheel.environments.sandbox.bwrap:BwrapSandbox",
    "docker": "flywheel.environments.sandbox.docker_backend:DockerSandbox",
    "process": "flywheel.environments.sandbox.process:ProcessSandbox",
}


def limits_from(cfg) -> Limits:
    """The `Limits` a SandboxConfig (or anything with the same fields) names."""
    return Limits(**{f.name: getattr(cfg, f.name) for f in fields(Limits)})


def libraries_dir(cfg) -> str | None:
    """`sandbox.libraries`, else <venv>/sandbox-lib when scripts/setup.sh made it."""
    import os
    import sys

    if cfg.libraries:
        if not os.path.isdir(cfg.libraries):
            raise ValueError(f"sandbox.libraries {cfg.libraries!r} is not a directory")
        return os.path.realpath(cfg.libraries)
    # the real path: bwrap opens it as `nobody`, who may not traverse the directory of a link
    # (a venv reached through a symlink in a private dir: python keeps the link in sys.prefix)
    default = os.path.realpath(os.path.join(sys.prefix, "sandbox-lib"))
    return default if os.path.isdir(default) else None


def make_sandbox(cfg, warmup: tuple[str, ...] = (), binds: tuple[tuple[str, str], ...] = ()) -> Sandbox:
    """Build the configured backend from a `SandboxConfig`; `warmup`: the domains' code
    run once per worker before it forks (Environment.sandbox_warmup), with an import of
    each module in `sandbox.preload`; `binds`: (host path, path inside) shown read-only
    (bwrap only: an agent's runs see the gateway's socket, tasks/agent_runs.py)."""
    import importlib

    if cfg.backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {cfg.backend!r}; known: {sorted(BACKENDS)}")
    module, cls = BACKENDS[cfg.backend].split(":")
    extra = {"recycle_after": cfg.recycle_after, "libraries": libraries_dir(cfg),
             "warmup": tuple(dict.fromkeys([*warmup, *(f"import {m}" for m in cfg.preload)]))}  # fmt: skip
    if binds:
        if cfg.backend != "bwrap":
            raise ValueError(f"sandbox backend {cfg.backend!r} cannot bind host paths in (bwrap can)")
        extra["binds"] = tuple(binds)
    if cfg.backend == "docker":
        extra["image"] = cfg.docker_image
        extra["hosts"] = cfg.docker_hosts
        extra["transport"] = cfg.docker_transport
    return getattr(importlib.import_module(module), cls)(
        limits_from(cfg), cfg.concurrency, cfg.python, **extra
    )


__all__ = [
    "ExecResult",
    "Job",
    "Limits",
    "Sandbox",
    "Workspace",
    "make_sandbox",
    "limits_from",
    "libraries_dir",
    "BACKENDS",
]
