"""docker backend: the same fork-server worker, in long-lived containers.

Each pool worker is one container running `worker.py` as its pid 1 (so kill(-1) of
leftovers works exactly as under bwrap). On an engine reached through a unix socket (the
same machine) the worker talks to us over a unix socket of our own, bind-mounted
read-only into that container alone: we accept its one connection, then unlink the
socket and close the listener, so nothing else in the container can connect again. This
keeps dockerd and containerd off the data path: through docker's attach stream every
message crossed both (measured: ~14% of the 2 cores went to dockerd at c=4, and the
pool ran at ~0.7x the bwrap pool's rate). A remote engine (tcp://, ssh://) gets the
attach stream of the container's stdin/stdout (`transport="attach"` forces it).
A container is recycled (removed, replaced) after `recycle_after` executions, and
killed and force-removed when it dies or stops answering: killing only a client would
leave the container running. Containers are created with `auto_remove`, so if this
process dies the worker reads EOF (on its socket, or on its stdin, attached with
`stdin_once`), exits and its container disappears with it.

Every container: non-root user 65534, network mode none, read-only root, /work and
/tmp as size-limited tmpfs, all capabilities dropped, no-new-privileges, no IPC
sharing, `mem_limit == memswap_limit` (no swap escape), `pids_limit`, and the cleared
environment of the worker. The code's own limits (rlimits, wall clock, output cap)
are enforced by the worker, as under bwrap, except processes: RLIMIT_NPROC is per host
uid without a user namespace, so `pids_limit` (from the pool's limits, not per job)
bounds them.

The image is built locally, without a registry (`flywheel sandbox build-image`,
docker_image.py). A pool may run another image, a Harbor task's own
(environments/sources/harbor_docker.py), with `env`, its ENV, given to every command; an
image's ENTRYPOINT, CMD and HEALTHCHECK are never used (the worker is pid 1, nothing else).

Several hosts (`hosts`, from `sandbox.docker_hosts`; empty: the environment's
DOCKER_HOST): workers are spread over the healthy hosts, which docker_hosts.py checks.
When a host is lost, every worker on it is cut off (its engine is gone: the containers
are not touched) and a one-shot job that was in flight there is run again on another
host. That job may already have run to the end on the lost host with its reply lost: it
is run again anyway, which is safe because a verification is idempotent (a fresh,
empty workspace, no state outside the sandbox, the same code and inputs). Exactly one
result is returned per job: the lost attempt's is dropped, never merged. A workspace
on a lost host starts over from its starting files on the next call (its in-flight
step is an infrastructure error), as after any worker death. Not done:
user-namespace remapping in dockerd.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import time

from flywheel.environments.sandbox.base import LIBRARIES, ExecResult, Job, Limits, Sandbox, SandboxUnavailable
from flywheel.environments.sandbox.docker_hosts import Host, HostSet, ping
from flywheel.environments.sandbox.docker_image import DEFAULT_IMAGE, NOBODY
from flywheel.environments.sandbox.pool import PoolSandbox, worker_mb
from flywheel.environments.sandbox.protocol import START_TIMEOUT_S, Transport, WorkerDied, worker_command

TMPFS_MB = 64
LABEL = "flywheel.sandbox"
SOCKET_DIR = "/flywheel"  # where a worker's socket is mounted in its container


def docker_unavailable(hosts: list[str] | None = None) -> str | None:
    """None when a docker engine answers (any of `hosts`; none given: DOCKER_HOST), else
    why not, naming each endpoint (for skips and errors)."""
    whys = [(url, ping(url)) for url in (hosts or [""])]
    if any(why is None for _, why in whys):
        return None
    return "no docker engine reachable: " + "; ".join(
        f"{url or 'DOCKER_HOST=' + os.environ.get('DOCKER_HOST', 'unset')} ({why})" for url, why in whys)


class DockerTransport(Transport):
    """A stream socket to one container's worker: our own unix socket (`framed=False`),
    or the container's attached stdin/stdout, whose output docker multiplexes without a
    tty: 8-byte frame headers (stream, 0, 0, 0, big-endian size)."""

    def __init__(self, client, container, sock, host: Host | None = None, on_gone=None, framed: bool = True):
        self.client, self.container, self.sock, self.framed = client, container, sock, framed
        self.raw: socket.socket = getattr(sock, "_sock", sock)
        self.buf = bytearray()
        self.killed = False
        self.host, self.on_gone = host, on_gone  # on_gone(host): once, when killed or cut

    def send(self, data: bytes) -> None:
        self.raw.sendall(data)

    def _frame(self, deadline: float) -> None:
        if not self.framed:
            self.buf += self._read_raw(0, deadline)
            return
        head = self._read_raw(8, deadline)
        stream, size = head[0], struct.unpack(">I", head[4:])[0]
        data = self._read_raw(size, deadline)
        if stream == 1:  # stdout carries the protocol; the worker's stderr is dropped
            self.buf += data

    def _read_raw(self, n: int, deadline: float) -> bytes:
        """Exactly n bytes; n=0: whatever one read brings (at least one byte)."""
        out = bytearray()
        while len(out) < n or not out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerDied("no reply in time")
            self.raw.settimeout(left)
            try:
                b = self.raw.recv(n - len(out) if n else 1 << 16)
            except socket.timeout:
                raise WorkerDied("no reply in time") from None
            if not b:
                raise WorkerDied("container closed its output")
            out += b
        return bytes(out)

    def fileno(self) -> int:
        return self.raw.fileno()

    def buffered(self) -> bool:
        return bool(self.buf)

    def recv(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            self._frame(deadline)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def cut(self) -> bool:
        """Shut our end without asking the engine anything (it may be gone): a call
        blocked on this worker in another thread gets EOF at once, later ones fail at
        once. Shut down, not closed: closing an fd that another thread is polling can
        leave that thread waiting on a dead (or reused) descriptor until its deadline.
        False when it was already cut or killed."""
        if self.killed:
            return False
        self.killed = True
        try:
            self.raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.on_gone:
            self.on_gone(self.host)
        return True

    def kill(self, remove: bool = True) -> None:
        """Cut, close, and (`remove`) have the engine kill and remove the container."""
        first = self.cut()
        for s in (self.sock, self.raw):  # the SDK's wrapper and the socket under it
            try:
                s.close()
            except OSError:
                pass
        if not (first and remove):
            return
        try:
            self.container.remove(force=True)  # kills it first; the container, not a client
        except Exception:  # noqa: BLE001  already gone (auto_remove), being removed, or its engine is gone
            pass


class DockerSandbox(PoolSandbox):
    name = "docker"

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = "/usr/bin/python3",
                 recycle_after: int = 10_000, image: str = DEFAULT_IMAGE, hosts: list[str] | None = None,
                 health_interval_s: float | None = None, transport: str = "auto", libraries: str | None = None,
                 warmup: tuple[str, ...] = (), env: dict[str, str] | None = None):
        if transport not in ("auto", "socket", "attach"):
            raise ValueError(f"docker transport must be auto, socket or attach, not {transport!r}")
        super().__init__(limits, concurrency, python, recycle_after, libraries, warmup)
        self.image, self.transport = image, transport
        self.env = dict(env or {})  # a task image's ENV, for every command (worker_child.task_environment)
        self.tag = f"{os.getpid()}-{id(self):x}"
        self.retried = 0  # one-shot jobs run again because their host was lost
        self.retired = 0  # workers retired from a crowded host to even out the load
        self.placement: dict[str, str] = {}  # container id -> the host it was started on
        extra = {"interval_s": health_interval_s} if health_interval_s else {}
        self.hosts = HostSet(list(hosts or []), admit=self._admit, on_down=self._host_down, **extra)

    # ---- hosts ------------------------------------------------------------------------
    def _admit(self, host: Host) -> str | None:
        """Before a host takes workers (at start, and when it comes back): the image is
        there, and containers this pool left there before the host was lost are gone."""
        try:
            host.client.images.get(self.image)
        except Exception as exc:  # noqa: BLE001
            return f"sandbox image {self.image!r} is missing: run `flywheel sandbox build-image` ({exc})"
        self._remove_leftovers(host)
        return None

    def _host_down(self, host: Host) -> None:
        """Drop every worker on a lost host: idle ones leave the pool, busy ones are cut
        (a call blocked on one returns now; its job is run again elsewhere, see `run`;
        its own thread closes it). Its engine is not asked to remove anything."""
        with self._lock:
            busy = [w for w in self._all if w.transport.host is host]
            idle = [w for w in self._idle if w.transport.host is host]
            self._idle = [w for w in self._idle if w.transport.host is not host]
            self._all.difference_update(idle)
        for worker in busy:
            worker.dead = True
            worker.transport.cut()
        for worker in idle:  # no thread holds these: close them here, without asking the engine
            worker.transport.kill(remove=False)

    def _remove_leftovers(self, host: Host) -> None:
        for c in host.client.containers.list(all=True, filters={"label": f"{LABEL}={self.tag}"}):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001
                pass

    # ---- workers ----------------------------------------------------------------------
    def _spawn(self) -> DockerTransport:
        hosts = self.hosts.candidates()
        if not hosts:  # one may have come back since the monitor last looked
            self.hosts.check_all()
            hosts = self.hosts.candidates()
        for host in hosts:
            try:
                return self._spawn_on(host)
            except Exception:
                if self.hosts.check(host):
                    raise  # the engine answers: a real error, which another host would repeat
        raise SandboxUnavailable(self.hosts.none_healthy())

    def _uses_socket(self, host: Host) -> bool:
        """Our own unix socket needs the engine on this machine: one reached by a unix socket."""
        if self.transport != "auto":
            return self.transport == "socket"
        return (host.url or os.environ.get("DOCKER_HOST") or "unix://").startswith("unix://")

    def _spawn_on(self, host: Host) -> DockerTransport:
        budget = f"{self.limits.memory_mb + 2 * TMPFS_MB + worker_mb(self.warmup)}m"
        tmpfs = f"size={TMPFS_MB}m,uid={NOBODY},gid={NOBODY},mode=0700,nosuid,nodev"
        api = host.client.api  # the low-level API: the high-level one cannot set StdinOnce
        listener, private = self._listen() if self._uses_socket(host) else (None, None)
        command, binds = worker_command(self.python), {}
        if listener is not None:
            command, binds = command + [f"{SOCKET_DIR}/w"], {f"{private}/s": {"bind": SOCKET_DIR, "mode": "ro"}}
        host_config = api.create_host_config(
            network_mode="none", read_only=True, tmpfs={"/work": tmpfs, "/tmp": tmpfs}, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], mem_limit=budget, memswap_limit=budget,
            pids_limit=self.limits.max_procs + 8, ipc_mode="none", auto_remove=True, binds=binds,
        )  # fmt: skip
        cid = None
        try:
            cid = api.create_container(  # the image's ENTRYPOINT, CMD and HEALTHCHECK are not used
                self.image, command[1:], entrypoint=command[:1], healthcheck={"test": ["NONE"]},
                user=f"{NOBODY}:{NOBODY}",
                working_dir="/work", network_disabled=True, host_config=host_config, labels={LABEL: self.tag},
                environment={"PATH": "/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8",
                             "PYTHONDONTWRITEBYTECODE": "1", "LD_BIND_NOW": "1",  # see bwrap.py
                             # the image holds sandbox.libraries at LIBRARIES when it was built with them
                             "FLYWHEEL_LIB": LIBRARIES, "FLYWHEEL_WARMUP": json.dumps(self.warmup),
                             **({"FLYWHEEL_ENV": json.dumps(self.env)} if self.env else {})},
                stdin_open=listener is None,  # with detach=False the SDK also sets StdinOnce
            )["Id"]  # fmt: skip
            container = host.client.containers.get(cid)
            if listener is None:
                sock = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                transport = DockerTransport(host.client, container, sock, host, self.hosts.gone)
                api.start(cid)
            else:
                api.start(cid)
                sock = self._accept(listener, api, cid)
                transport = DockerTransport(host.client, container, sock, host, self.hosts.gone, framed=False)
        except BaseException:
            if cid is not None:
                try:
                    api.remove_container(cid, force=True)
                except Exception:  # noqa: BLE001  the engine went away meanwhile: the first error counts
                    pass
            raise
        finally:
            if listener is not None:  # one connection, then nobody can connect again
                listener.close()
                shutil.rmtree(private, ignore_errors=True)
        self.hosts.started(host)
        self.placement[cid] = host.name
        return transport

    @staticmethod
    def _listen() -> tuple[socket.socket, str]:
        """A listening socket `<private>/s/w` for one worker, and `private`: a 0700 dir of
        ours, so no other host user reaches the socket; `s` is what the container mounts."""
        base = tempfile.gettempdir()
        private = tempfile.mkdtemp(prefix="flywheel-docker-", dir=base if len(base) < 64 else "/tmp")  # AF_UNIX: < 108 bytes
        os.mkdir(f"{private}/s", 0o711)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(f"{private}/s/w")
        os.chmod(f"{private}/s/w", 0o666)  # the worker's uid must be able to connect()
        listener.listen(1)
        return listener, private

    @staticmethod
    def _accept(listener: socket.socket, api, cid: str) -> socket.socket:
        """The worker's connection, or an error once its container has stopped or
        START_TIMEOUT_S has passed."""
        deadline = time.monotonic() + START_TIMEOUT_S
        listener.settimeout(0.5)
        while True:
            try:
                sock, _ = listener.accept()
                sock.settimeout(None)
                return sock
            except TimeoutError:
                pass
            if time.monotonic() > deadline:
                raise WorkerDied(f"container {cid[:12]}'s worker did not connect in {START_TIMEOUT_S:.0f} s")
            try:
                state = api.inspect_container(cid)["State"]
            except Exception as exc:  # noqa: BLE001  removed (auto_remove) once it stopped
                raise WorkerDied(f"container {cid[:12]} stopped before its worker connected ({exc})") from exc
            if not state.get("Running"):
                raise WorkerDied(f"container {cid[:12]} stopped before its worker connected: {state}")

    def _release(self, worker, wipe: bool) -> None:
        if not worker.dead and self.hosts.crowded(worker.transport.host):
            worker.kill()  # the slot's next worker starts on the least loaded host
            with self._lock:
                self.retired += 1
        super()._release(worker, wipe)

    def run(self, job: Job) -> ExecResult:
        """A one-shot job. When the host it ran on is lost meanwhile, it is run again on
        another (at most once per host): one result per job, the lost attempt's dropped."""
        limits = job.limits or self.limits
        for _ in range(len(self.hosts.hosts) + 1):
            downs = self.hosts.downs
            try:
                worker = self._acquire()
            except Exception as exc:
                res = ExecResult(None, "", "", 0.0, error=f"sandbox unavailable: {type(exc).__name__}: {exc}")
                self.hosts.check_all()
                lost = self.hosts.downs != downs and bool(self.hosts.healthy())
            else:
                host = worker.transport.host
                host_downs = host.downs
                try:  # files, run and wipe in one round trip: the worker wipes /work and /tmp itself
                    res = self._run_on(worker, job.argv, None, job.stdin, limits, job.files, True)
                finally:
                    self._release(worker, wipe=False)
                lost = res.error is not None and (host.downs != host_downs or not self.hosts.check(host))
            if res.error is None or not lost:
                return res
            with self._lock:
                self.retried += 1
        return res

    def map(self, jobs: list[Job]) -> list[ExecResult]:
        """With several hosts, jobs go through run() from one thread per slot: run() re-runs
        a job whose host was lost, which the pool's single-thread map() does not try."""
        if len(self.hosts.hosts) > 1:
            return Sandbox.map(self, jobs)
        return super().map(jobs)

    def _wire_limits(self, limits: Limits) -> dict:
        # Without a user namespace, RLIMIT_NPROC counts every process of uid 65534 on the
        # host, all containers (and bwrap sandboxes) together: a busy pool would make it
        # refuse forks. The container's pids_limit is the per-sandbox bound instead.
        return {**super()._wire_limits(limits), "max_procs": 1 << 15}

    def close(self) -> None:
        self.hosts.stop()  # no host is admitted or cut while we close
        super().close()
        for host in self.hosts.hosts:
            if host.healthy and host.client is not None:
                try:
                    self._remove_leftovers(host)
                except Exception:  # noqa: BLE001  lost meanwhile
                    pass
        self.hosts.close()  # the clients' pooled HTTP connections
