"""The sandbox interface: run untrusted code with files, stdin and limits.

Every backend returns an `ExecResult` and never raises for what the code did (crash,
time-out, memory): those are results. An infrastructure failure (the sandbox could not
start, or its worker died mid-execution) is reported in `ExecResult.error` so the caller
can record or retry it.

Two ways in: `Sandbox.run(job)` / `map(jobs)` for one-shot jobs in a fresh, empty
workspace (verification), and `Sandbox.workspace(files)` for a workspace held across
the several commands of one trajectory, with `reset()` back to a snapshot.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path


class SandboxUnavailable(RuntimeError):
    """The sandbox backend cannot run here (bubblewrap missing, its python missing, no
    docker engine answering): said at start-up, before any work, in words a user can act on."""


LIBRARIES = "/opt/flywheel-lib"  # where `sandbox.libraries` appears inside a sandbox


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    max_procs: int = 32
    file_size_mb: int = 16
    output_bytes: int = 65536


@dataclass
class ExecResult:
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None  # the sandbox failed, not the code


@dataclass
class Job:
    """A one-shot execution. `argv[0] == "python"` means the sandbox's interpreter.
    Model-written code belongs in `files`; a `python -c` program is taken to be the
    environment's own harness (pool backends keep it compiled across executions)."""

    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)
    stdin: str = ""
    limits: Limits | None = None


RLIMIT_PRELUDE = """
import os, resource, sys
def _lim(name, value):
    resource.setrlimit(getattr(resource, name), (value, value))
_lim("RLIMIT_AS", {memory})
_lim("RLIMIT_CPU", {cpu})
_lim("RLIMIT_NPROC", {procs})
_lim("RLIMIT_FSIZE", {fsize})
_lim("RLIMIT_NOFILE", 256)
_lim("RLIMIT_CORE", 0)
os.execv(sys.argv[1], sys.argv[1:])
"""


def rlimit_launcher(python: str, limits: Limits) -> list[str]:
    """argv prefix that sets rlimits in the sandboxed process, then execs the real argv."""
    code = RLIMIT_PRELUDE.format(
        memory=limits.memory_mb << 20,
        cpu=limits.cpu_s,
        procs=limits.max_procs,
        fsize=limits.file_size_mb << 20,
    )
    return [python, "-I", "-S", "-c", code]


class Workspace(ABC):
    """A sandboxed working directory (/work inside) held across several executions, e.g.
    the commands of one trajectory. Leftover processes are killed after every run; files
    in /work and /tmp stay until `reset()` (back to the last snapshot, by default the
    files given at acquire) or `release()` (wiped, the sandbox goes back to the pool)."""

    @abstractmethod
    def run(self, argv: list[str] | None = None, *, code: str | None = None, stdin: str = "",
            limits: Limits | None = None) -> ExecResult:
        """argv ("python" means the sandbox's interpreter), or python `code`."""

    @abstractmethod
    def put(self, files: dict[str, str]) -> None: ...

    @abstractmethod
    def read_file(self, path: str, max_bytes: int = 1 << 20) -> str: ...

    @abstractmethod
    def snapshot(self) -> None:
        """Make the current files the state that `reset()` returns to."""

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def release(self) -> None: ...

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Sandbox(ABC):
    """A backend that runs `Job`s in isolated workspaces: `run`/`map` for one-shot jobs
    (a fresh, empty workspace each), `workspace(files)` for one held across steps."""

    name: str = "abstract"
    safe: bool = True

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = "/usr/bin/python3",
                 libraries: str | None = None, warmup: tuple[str, ...] = ()):
        self.limits = limits
        self.concurrency = concurrency
        self.python = python
        # a host dir of packages the sandbox's python may import (read-only, at LIBRARIES
        # inside), and code each worker runs once before it forks (imports, caches)
        self.libraries, self.warmup = (os.path.abspath(libraries) if libraries else None), tuple(warmup)

    def _execute(self, job: Job, workdir: Path, limits: Limits) -> ExecResult:
        """For backends that run each job in a host temp dir (see `run`)."""
        raise NotImplementedError

    def run(self, job: Job) -> ExecResult:
        limits = job.limits or self.limits
        workdir = Path(tempfile.mkdtemp(prefix="flywheel-sbx-"))
        start = time.monotonic()
        try:
            for name, content in job.files.items():
                target = (workdir / name).resolve()
                if workdir.resolve() not in target.parents:
                    raise ValueError(f"file name {name!r} escapes the workspace")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            return self._execute(job, workdir, limits)
        except Exception as exc:  # the sandbox broke; the job's result is an error
            return ExecResult(None, "", "", time.monotonic() - start, error=f"{type(exc).__name__}: {exc}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def map(self, jobs: list[Job]) -> list[ExecResult]:
        """Run many jobs at the configured concurrency, results in job order."""
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(self.run, jobs))

    @abstractmethod
    def workspace(self, files: dict[str, str] | None = None) -> Workspace:
        """Acquire a workspace holding `files`; use it as a context manager."""

    def close(self) -> None:
        pass

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cap_output(data: bytes, limit: int) -> tuple[str, bool]:
    truncated = len(data) > limit
    return data[:limit].decode("utf-8", errors="replace"), truncated


def spawn_and_collect(argv: list[str], stdin: str, limits: Limits, **popen_kwargs) -> ExecResult:
    """Run argv in a new session; at the wall-clock limit kill its whole process group.
    stdout/stderr go to host temp files (never pipes that could fill memory), of which
    at most `limits.output_bytes` are read back."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True,
            close_fds=True, **popen_kwargs,
        )  # fmt: skip
        timed_out = False
        try:
            proc.communicate(stdin.encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        duration = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout, t1 = cap_output(out.read(limits.output_bytes + 1), limits.output_bytes)
        stderr, t2 = cap_output(err.read(limits.output_bytes + 1), limits.output_bytes)
    return ExecResult(proc.returncode, stdout, stderr, duration, timed_out=timed_out, truncated=t1 or t2)
