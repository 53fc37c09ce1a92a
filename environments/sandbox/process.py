"""UNSAFE development backend: a plain subprocess with rlimits and a wall-clock kill.

It has no filesystem, network or user isolation: model-written code can read your files
and reach your network. Use it only to develop on machines without bubblewrap; it is
never the default and it says so loudly when created.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from environments.sandbox.base import ExecResult, Job, Limits, Sandbox, cap_output, rlimit_launcher


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
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            proc = subprocess.Popen(
                argv, cwd=workdir, stdin=subprocess.PIPE, stdout=out, stderr=err,
                env={"PATH": "/usr/bin:/bin", "HOME": str(workdir)}, start_new_session=True,
            )  # fmt: skip
            timed_out = False
            try:
                proc.communicate(job.stdin.encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            duration = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            stdout, t1 = cap_output(out.read(limits.output_bytes + 1), limits.output_bytes)
            stderr, t2 = cap_output(err.read(limits.output_bytes + 1), limits.output_bytes)
        return ExecResult(proc.returncode, stdout, stderr, duration, timed_out, t1 or t2)
