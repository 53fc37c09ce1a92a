"""bubblewrap backend (the default): a warm pool of sandboxed fork-server workers.

Each worker is one long-lived bwrap sandbox running `worker.py` under the sandbox's
/usr/bin/python3; it forks a child per execution (see worker.py for the per-execution
rules: rlimits, new session, wall-clock kill, kill(-1) of leftovers, wipe).

The sandbox: bwrap runs as the host's `nobody` when we are root (so even a kernel bug
in the user namespace leaves an unprivileged host uid), in new user, pid, net, ipc,
uts and cgroup namespaces with nested user namespaces disabled (`--disable-userns`),
no capabilities, `--new-session` (no TIOCSTI into a terminal), `--die-with-parent`
and `--as-pid-1` (the worker is the namespace's init, which is what lets it kill every
leftover process and not itself). The root holds only a read-only /usr (plus the
interpreter's prefix when it lives elsewhere, and the read-only `binds` a caller names:
the gateway's socket for an agent's runs), a fresh /proc and minimal /dev;
/work and /tmp are size-limited tmpfs mounts of the sandbox itself, so no host
directory is ever writable or even visible. The environment is cleared.

cgroup limits where the machine allows (root and a writable cgroup v1 memory and pids
hierarchy, as here): each worker gets its own memory cgroup (the code's memory plus
the two tmpfs mounts plus the worker) and pids cgroup, nested under the cgroup we run
in, so they add to, never escape, the limits above us. Without them, rlimits still
bound each process (RLIMIT_NPROC is counted per user namespace on kernels >= 5.14).
cgroup v2 and the cpu controller are not used: not available here, and RLIMIT_CPU plus
the wall clock already bound CPU per execution.

Not done: seccomp filters (bwrap can load one; no filter is shipped yet), and a way to
keep background processes alive between the steps of a workspace (all are killed).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from flywheel.environments.sandbox.base import LIBRARIES, Job, Limits, SandboxUnavailable
from flywheel.environments.sandbox.pool import PoolSandbox, worker_mb
from flywheel.environments.sandbox.protocol import Transport, WorkerDied, worker_command

NOBODY = 65534
TMPFS_MB = 64  # each of /work and /tmp


def _interpreter_binds(python: str) -> list[str]:
    """Read-only binds for an interpreter that does not live under /usr."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return []
    prefix = str(Path(real).parent.parent)
    return ["--ro-bind", prefix, prefix]


def _own_cgroup(controller: str) -> Path | None:
    """Our cgroup v1 directory for a controller, when we may create children in it."""
    base = Path("/sys/fs/cgroup") / controller
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(","):
                own = base / path.lstrip("/")
                return own if os.geteuid() == 0 and os.access(own, os.W_OK) else None
    except OSError:
        pass
    return None


class BwrapTransport(Transport):
    def __init__(self, proc: subprocess.Popen, errlog, cgroups: list[Path]):
        self.proc, self.errlog, self.cgroups = proc, errlog, cgroups
        self.rfd, self.wfd = proc.stdout.fileno(), proc.stdin.fileno()
        self.buf = b""  # read ahead: a reply's length and body mostly come in one read
        self.killed = False

    def send(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.wfd, data) :]

    def recv(self, n: int, deadline: float) -> bytes:
        chunks, have = [self.buf], len(self.buf)
        while have < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                raise WorkerDied("no reply in time")
            b = os.read(self.rfd, max(n - have, 1 << 16))
            if not b:
                raise WorkerDied(f"worker exited: {self.stderr()}")
            chunks.append(b)
            have += len(b)
        data = b"".join(chunks) if len(chunks) > 1 else chunks[0]
        self.buf = data[n:]
        return data[:n]

    def fileno(self) -> int:
        return self.rfd

    def buffered(self) -> bool:
        return bool(self.buf)

    def stderr(self) -> str:
        self.errlog.seek(0)
        return self.errlog.read(2000).decode(errors="replace").strip() or f"exit {self.proc.poll()}"

    def kill(self) -> None:
        if self.killed:
            return
        self.killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap; the worker follows by die-with-parent
        except ProcessLookupError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.errlog):
            try:
                f.close()
            except OSError:
                pass
        for cg in self.cgroups:  # empty once the sandbox's last process is gone
            for _ in range(100):
                try:
                    cg.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


class BwrapSandbox(PoolSandbox):
    name = "bwrap"

    def __init__(
        self,
        limits: Limits,
        concurrency: int = 4,
        python: str = "/usr/bin/python3",
        recycle_after: int = 0,
        cgroups: bool = True,
        libraries: str | None = None,
        warmup: tuple[str, ...] = (),
        binds: tuple[tuple[str, str], ...] = (),
    ):
        super().__init__(limits, concurrency, python, recycle_after, libraries, warmup)
        # (host path, path inside): read-only, e.g. the gateway's socket for an agent's runs
        self.binds = tuple((os.path.abspath(src), dst) for src, dst in binds)
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed: apt-get install bubblewrap (or sandbox.backend=docker)"
            )
        if not os.path.exists(python):
            raise SandboxUnavailable(f"sandbox python {python!r} does not exist (sandbox.python)")
        self.drop_to_nobody = os.geteuid() == 0
        # drop to nobody with setpriv in the child, not Popen(user=...): CPython then
        # fork()s this whole process instead of vfork()ing it, and a host process holding
        # gigabytes (a trainer, an engine) is refused the fork (ENOMEM) where memory is
        # committed. Popen's way only if util-linux's setpriv is missing.
        self.setpriv = shutil.which("setpriv") if self.drop_to_nobody else None
        roots = [_own_cgroup("memory"), _own_cgroup("pids")] if cgroups else [None]
        self.cgroup_roots = roots if all(roots) else []
        self.tag = f"flywheel-sbx-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def _argv(self) -> list[str]:
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
            *(["--ro-bind", self.libraries, LIBRARIES] if self.libraries else []),
            *(arg for src, dst in self.binds for arg in ("--ro-bind", src, dst)),
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(TMPFS_MB << 20), "--tmpfs", "/tmp",
            "--size", str(TMPFS_MB << 20), "--tmpfs", "/work", "--chdir", "/work",
            # bwrap's own root and /dev are tmpfs mounts, writable and unbounded unless remounted
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", "/work",
            "--setenv", "LANG", "C.UTF-8",
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            # the worker's symbols bound at start, not again in every forked child (it unsets it)
            "--setenv", "LD_BIND_NOW", "1",
            # sandbox.libraries and what to import from them (worker_startup.load_libraries unsets both)
            *(["--setenv", "FLYWHEEL_LIB", LIBRARIES] if self.libraries else []),
            *(["--setenv", "FLYWHEEL_WARMUP", json.dumps(self.warmup)] if self.warmup else []),
            "--",
            *worker_command(self.python),
        ]  # fmt: skip

    def _make_cgroups(self) -> list[Path]:
        """A memory and a pids cgroup for one worker, whose procs file `nobody` may
        write, so the unprivileged launcher can move itself in before bwrap starts."""
        made = []
        mem_root, pids_root = self.cgroup_roots
        name = f"{self.tag}-{uuid.uuid4().hex[:8]}"
        try:
            mem = mem_root / name
            mem.mkdir()
            made.append(mem)
            budget = (self.limits.memory_mb + 2 * TMPFS_MB + worker_mb(self.warmup)) << 20
            (mem / "memory.limit_in_bytes").write_text(str(budget))
            swap = mem / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(budget))
            pids = pids_root / name
            pids.mkdir()
            made.append(pids)
            (pids / "pids.max").write_text(str(self.limits.max_procs + 8))
            for cg in made:
                os.chown(cg / "cgroup.procs", NOBODY if self.drop_to_nobody else -1, -1)
        except OSError:
            for cg in reversed(made):
                cg.rmdir()
            self.cgroup_roots = []  # this machine does not allow it: rlimits only
            return []
        return made

    def _spawn(self) -> BwrapTransport:
        cgroups = self._make_cgroups() if self.cgroup_roots else []
        argv = self._argv()
        if self.setpriv:
            drop = ["--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
            argv = [self.setpriv, *drop, "--", *argv]
        if cgroups:  # the launcher joins the cgroups itself, so bwrap and all it starts are in them
            join = (
                'for f in "$@"; do case $f in --) shift; break;; esac; echo $$ > "$f"; shift; done; exec "$@"'
            )
            argv = ["/bin/sh", "-c", join, "sh", *[str(c / "cgroup.procs") for c in cgroups], "--", *argv]
        by_popen = self.drop_to_nobody and not self.setpriv
        extra = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if by_popen else {}
        errlog = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, env={}, cwd="/",
            start_new_session=True, close_fds=True, **extra,
        )  # fmt: skip
        return BwrapTransport(proc, errlog, cgroups)


def check_available(python: str = "/usr/bin/python3") -> str | None:
    """None when a trivial sandboxed run works, else the reason it does not."""
    try:
        box = BwrapSandbox(Limits(wall_s=10), 1, python)
    except RuntimeError as exc:
        return str(exc)
    try:
        res = box.run(Job(["python", "-c", "print(6*7)"]))
    finally:
        box.close()
    if res.error or res.stdout.strip() != "42":
        return f"bubblewrap cannot run a sandbox here: {res.error or res.stderr.strip()}"
    return None


if __name__ == "__main__":  # a quick self-check: python -m flywheel.environments.sandbox.bwrap
    print(check_available(sys.argv[1] if len(sys.argv) > 1 else "/usr/bin/python3") or "ok")
