"""Sandbox backends, chosen by `sandbox.backend` in the config. One file per backend."""

from __future__ import annotations

from environments.sandbox.base import ExecResult, Job, Limits, Sandbox

BACKENDS = {
    "bwrap": "environments.sandbox.bwrap:BwrapSandbox",
    "process": "environments.sandbox.process:ProcessSandbox",
}


def make_sandbox(cfg) -> Sandbox:
    """Build the configured backend from a `SandboxConfig`."""
    import importlib

    if cfg.backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {cfg.backend!r}; known: {sorted(BACKENDS)}")
    module, cls = BACKENDS[cfg.backend].split(":")
    limits = Limits(
        wall_s=cfg.wall_s, cpu_s=cfg.cpu_s, memory_mb=cfg.memory_mb, max_procs=cfg.max_procs,
        file_size_mb=cfg.file_size_mb, output_bytes=cfg.output_bytes,
    )  # fmt: skip
    return getattr(importlib.import_module(module), cls)(limits, cfg.concurrency, cfg.python)


__all__ = ["ExecResult", "Job", "Limits", "Sandbox", "make_sandbox", "BACKENDS"]
