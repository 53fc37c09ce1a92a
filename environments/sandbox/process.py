"""UNSAFE development backend: a plain subprocess with rlimits and a wall-clock kill.

It has no filesystem, network or user isolation: model-written code can read your files
and reach your network. Use it only to develop on machines without bubblewrap; it is
never the default and it says so loudly when created.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from environments.sandbox.base import ExecResult, Job, Limits, Sandbox, rlimit_launcher, spawn_and_collect


class ProcessSandbox(Sandbox):
    name = "process"
    safe = False

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = sys.executable):
        super().__init__(limits, concurrency, python)
        warnings.warn(
            "sandbox.backend=process runs model-written code WITHOUT isolation (no network, "
            "file or user separation). Development only.",
            stacklevel=2,
        )

    def _execute(self, job: Job, workdir: Path, limits: Limits) -> ExecResult:
        argv = [*rlimit_launcher(self.python, limits), *[self.python if a == "python" else a for a in job.argv]]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir)}
        return spawn_and_collect(argv, job.stdin, limits, cwd=workdir, env=env)
