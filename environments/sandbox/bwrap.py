"""bubblewrap backend: a fresh, unprivileged, network-less sandbox per execution.

What it does: runs bwrap as the host's `nobody` (when started as root), in new user,
pid, net, ipc, uts and cgroup namespaces with nested user namespaces disabled; the
root is read-only and holds only /usr (plus the interpreter's prefix); /tmp is a small
tmpfs; the environment is cleared; rlimits (address space, CPU, processes, file size,
open files, core) are set inside before the code starts; the wall-clock limit kills
bwrap's whole process group, and `--die-with-parent --as-pid-1` take every process
in the sandbox down with it. stdout/stderr go to host files, so RLIMIT_FSIZE also caps
what a flood of output can cost.

What it does not do (yet): keep warm workers or workspaces across calls, or cgroup
limits; those come with the pool in the sandbox issue.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from environments.sandbox.base import ExecResult, Job, Limits, Sandbox, rlimit_launcher, spawn_and_collect

NOBODY = 65534


def _interpreter_binds(python: str) -> list[str]:
    """Read-only binds for an interpreter that does not live under /usr."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return []
    prefix = str(Path(real).parent.parent)
    return ["--ro-bind", prefix, prefix]


class BwrapSandbox(Sandbox):
    name = "bwrap"

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = "/usr/bin/python3"):
        super().__init__(limits, concurrency, python)
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None:
            raise RuntimeError("bubblewrap is not installed: apt-get install bubblewrap")
        if not os.path.exists(python):
            raise RuntimeError(f"sandbox python {python!r} does not exist (sandbox.python)")
        self.drop_to_nobody = os.geteuid() == 0

    def _argv(self, job: Job, limits: Limits) -> list[str]:
        return [
            self.bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--uid", str(NOBODY), "--gid", str(NOBODY),
            "--die-with-parent", "--new-session", "--as-pid-1",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin",
            *_interpreter_binds(self.python),
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(64 << 20), "--tmpfs", "/tmp",
            "--bind", "{workdir}", "/work", "--chdir", "/work",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", "/work",
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            "--",
            *rlimit_launcher(self.python, limits),
            *[self.python if a == "python" else a for a in job.argv],
        ]  # fmt: skip

    def _execute(self, job: Job, workdir: Path, limits: Limits) -> ExecResult:
        argv = [str(workdir) if a == "{workdir}" else a for a in self._argv(job, limits)]
        if self.drop_to_nobody:
            for path in [workdir, *workdir.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
        extra = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if self.drop_to_nobody else {}
        res = spawn_and_collect(argv, job.stdin, limits, env={}, **extra)
        if res.exit_code not in (0, None) and "bwrap:" in res.stderr[:200] and not res.timed_out:
            res.error = f"bwrap failed: {res.stderr.strip()[:300]}"  # the sandbox, not the code
        return res


def check_available(python: str = "/usr/bin/python3") -> str | None:
    """None when a trivial sandboxed run works, else the reason it does not."""
    try:
        box = BwrapSandbox(Limits(wall_s=10), 1, python)
    except RuntimeError as exc:
        return str(exc)
    res = box.run(Job(["python", "-c", "print(6*7)"]))
    if res.error or res.stdout.strip() != "42":
        return f"bubblewrap cannot run a sandbox here: {res.error or res.stderr.strip()}"
    return None


if __name__ == "__main__":  # a quick self-check: python -m environments.sandbox.bwrap
    print(check_available(sys.argv[1] if len(sys.argv) > 1 else "/usr/bin/python3") or "ok")
