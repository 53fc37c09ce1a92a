"""UNSAFE development backend: a plain subprocess with rlimits and a wall-clock kill.

It has no filesystem, network or user isolation: model-written code can read your files
and reach your network. Use it only to develop on machines without bubblewrap; it is
never the default and it says so loudly when created. It does not use the pool's
worker: that worker's kill(-1) of leftovers is only safe as the init of its own pid
namespace, which a plain process is not. Each execution is a fresh interpreter in a
host temp dir; a workspace is a host temp dir kept across runs, its snapshot a copy.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from flywheel.environments.sandbox.base import ExecResult, Job, Limits, Sandbox, Workspace, rlimit_launcher, spawn_and_collect


class ProcessSandbox(Sandbox):
    name = "process"
    safe = False

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = sys.executable, **_ignored):
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

    def workspace(self, files: dict[str, str] | None = None) -> "DirWorkspace":
        return DirWorkspace(self, files or {})


class DirWorkspace(Workspace):
    def __init__(self, box: ProcessSandbox, files: dict[str, str]):
        self.box = box
        self.root = Path(tempfile.mkdtemp(prefix="flywheel-ws-"))
        self.dir, self.snap = self.root / "work", self.root / "snapshot"
        self.dir.mkdir()
        self.put(files)
        self.snapshot()

    def _path(self, name: str) -> Path:
        target = (self.dir / name).resolve()
        if self.dir.resolve() not in target.parents:
            raise ValueError(f"file name {name!r} escapes the workspace")
        return target

    def run(self, argv=None, *, code=None, stdin="", limits=None) -> ExecResult:
        job = Job(list(argv) if argv is not None else ["python", "-c", code or ""], stdin=stdin, limits=limits)
        return self.box._execute(job, self.dir, limits or self.box.limits)

    def put(self, files: dict[str, str]) -> None:
        for name, content in files.items():
            target = self._path(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)

    def read_file(self, path: str, max_bytes: int = 1 << 20) -> str:
        with open(self._path(path), "rb") as f:
            return f.read(max_bytes).decode("utf-8", "replace")

    def snapshot(self) -> None:
        shutil.rmtree(self.snap, ignore_errors=True)
        shutil.copytree(self.dir, self.snap, symlinks=True)

    def reset(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.copytree(self.snap, self.dir, symlinks=True)

    def release(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
