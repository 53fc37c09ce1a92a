"""docker backend: the same fork-server worker, in long-lived containers.

Each pool worker is one container running `worker.py` as its pid 1 (so kill(-1) of
leftovers works exactly as under bwrap), talking over the container's attached
stdin/stdout. A container is recycled (removed, replaced) after `recycle_after`
executions, and killed and force-removed when it dies or stops answering: killing only
a client would leave the container running. Containers are created with
`stdin_once` and `auto_remove`, so if this process dies the worker reads EOF, exits
and its container disappears with it.

Every container: non-root user 65534, network mode none, read-only root, /work and
/tmp as size-limited tmpfs, all capabilities dropped, no-new-privileges, no IPC
sharing, `mem_limit == memswap_limit` (no swap escape), `pids_limit`, and the cleared
environment of the worker. The code's own limits (rlimits, wall clock, output cap)
are enforced by the worker, as under bwrap, except processes: RLIMIT_NPROC is per host
uid without a user namespace, so `pids_limit` (from the pool's limits, not per job)
bounds them.

The image is built locally, without a registry (`flywheel sandbox build-image`): a
rootfs of the host's system python (interpreter, stdlib without its tests, the shared
libraries they load), /bin/sh and a few core tools, imported as an image. It has no
package manager and no site-packages, on purpose. Not done: remote docker hosts and
spreading a pool over several hosts (issue 9); user-namespace remapping in dockerd.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from environments.sandbox.base import Limits
from environments.sandbox.pool import PoolSandbox, Transport, WorkerDied, worker_command

DEFAULT_IMAGE = "flywheel-sandbox:latest"
NOBODY = 65534
TMPFS_MB = 64
WORKER_MB = 64
LABEL = "flywheel.sandbox"
TOOLS = ["sh", "dash", "bash", "cat", "echo", "ls", "cp", "mv", "rm", "mkdir", "rmdir", "touch", "head",
         "tail", "wc", "sort", "uniq", "grep", "sed", "env", "true", "false", "sleep", "id", "test", "diff",
         "find", "xargs", "chmod", "ln", "pwd", "basename", "dirname", "cut", "tr", "tee", "printf", "timeout"]


def _client():
    import docker  # the SDK reads DOCKER_HOST like the CLI does

    return docker.from_env(timeout=60)


def docker_unavailable() -> str | None:
    """None when a docker engine answers, else why not (for skips and errors)."""
    try:
        client = _client()
        try:
            client.ping()
        finally:
            client.close()
        return None
    except Exception as exc:  # noqa: BLE001 (any failure means: no usable engine)
        return f"no docker engine reachable (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')}): {exc}"


class DockerTransport(Transport):
    """The container's attached stdin/stdout. Without a tty docker multiplexes the
    output: 8-byte frame headers (stream, 0, 0, 0, big-endian size)."""

    def __init__(self, client, container, sock):
        self.client, self.container, self.sock = client, container, sock
        self.raw: socket.socket = getattr(sock, "_sock", sock)
        self.buf = bytearray()
        self.killed = False

    def send(self, data: bytes) -> None:
        self.raw.sendall(data)

    def _frame(self, deadline: float) -> None:
        head = self._read_raw(8, deadline)
        stream, size = head[0], struct.unpack(">I", head[4:])[0]
        data = self._read_raw(size, deadline)
        if stream == 1:  # stdout carries the protocol; the worker's stderr is dropped
            self.buf += data

    def _read_raw(self, n: int, deadline: float) -> bytes:
        out = bytearray()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerDied("no reply in time")
            self.raw.settimeout(left)
            try:
                b = self.raw.recv(n - len(out))
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

    def kill(self) -> None:
        if self.killed:
            return
        self.killed = True
        for s in (self.sock, self.raw):  # the SDK's wrapper and the socket under it
            try:
                s.close()
            except OSError:
                pass
        try:
            self.container.remove(force=True)  # kills it first; the container, not a client
        except Exception:  # noqa: BLE001  already gone (auto_remove) or being removed
            pass


class DockerSandbox(PoolSandbox):
    name = "docker"

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = "/usr/bin/python3",
                 recycle_after: int = 1000, image: str = DEFAULT_IMAGE):
        super().__init__(limits, concurrency, python, recycle_after)
        why = docker_unavailable()
        if why:
            raise RuntimeError(why)
        self.client = _client()
        self.image = image
        try:
            self.client.images.get(image)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"sandbox image {image!r} is missing: run `flywheel sandbox build-image` ({exc})")
        self.tag = f"{os.getpid()}-{id(self):x}"

    def _spawn(self) -> DockerTransport:
        budget = f"{self.limits.memory_mb + 2 * TMPFS_MB + WORKER_MB}m"
        tmpfs = f"size={TMPFS_MB}m,uid={NOBODY},gid={NOBODY},mode=0700,nosuid,nodev"
        api = self.client.api  # the low-level API: the high-level one cannot set StdinOnce
        host_config = api.create_host_config(
            network_mode="none", read_only=True, tmpfs={"/work": tmpfs, "/tmp": tmpfs}, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], mem_limit=budget, memswap_limit=budget,
            pids_limit=self.limits.max_procs + 8, ipc_mode="none", auto_remove=True,
        )  # fmt: skip
        cid = api.create_container(
            self.image, worker_command(self.python), user=f"{NOBODY}:{NOBODY}",
            working_dir="/work", network_disabled=True, host_config=host_config, labels={LABEL: self.tag},
            environment={"PATH": "/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8",
                         "PYTHONDONTWRITEBYTECODE": "1", "LD_BIND_NOW": "1"},  # see bwrap.py
            stdin_open=True,  # with detach=False the SDK also sets StdinOnce
        )["Id"]  # fmt: skip
        container = self.client.containers.get(cid)
        try:
            sock = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            transport = DockerTransport(self.client, container, sock)
            api.start(cid)
        except BaseException:
            api.remove_container(cid, force=True)
            raise
        return transport

    def _wire_limits(self, limits: Limits) -> dict:
        # Without a user namespace, RLIMIT_NPROC counts every process of uid 65534 on the
        # host, all containers (and bwrap sandboxes) together: a busy pool would make it
        # refuse forks. The container's pids_limit is the per-sandbox bound instead.
        return {**super()._wire_limits(limits), "max_procs": 1 << 15}

    def close(self) -> None:
        super().close()
        for c in self.client.containers.list(all=True, filters={"label": f"{LABEL}={self.tag}"}):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001
                pass
        self.client.close()  # its pooled HTTP connections


# ---- the image ------------------------------------------------------------------------
def _canonical(path: str) -> str:
    """The path with a merged-/usr top directory (/lib -> /usr/lib) resolved, but the
    file itself left as it is (a symlink stays a symlink)."""
    head, _, rest = path.lstrip("/").partition("/")
    top = "/" + head
    if os.path.islink(top):
        return os.path.join("/", os.path.dirname(top), os.readlink(top), rest).replace("//", "/")
    return path


def _libraries(binaries: list[str]) -> set[str]:
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/") and ".so" in os.path.basename(p) and os.path.exists(p):
                libs.add(p)
    return libs


def _add(tar: tarfile.TarFile, path: str, seen: set[str]) -> None:
    path = os.path.normpath(_canonical(path))
    if path in seen or not os.path.lexists(path):
        return
    seen.add(path)
    parent = os.path.dirname(path)
    if parent != "/":
        _add(tar, parent, seen) if parent not in seen else None
    info = tar.gettarinfo(path, arcname=path.lstrip("/"))
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if info.isdir():
        tar.addfile(info)
    elif info.issym():
        tar.addfile(info)
        _add(tar, os.path.join(parent, os.readlink(path)), seen)
    elif info.isfile():
        with open(path, "rb") as f:
            tar.addfile(info, f)


def build_rootfs(tar_path: str, python: str = "/usr/bin/python3") -> None:
    real = os.path.realpath(python)
    stdlib = Path(subprocess.check_output([real, "-I", "-S", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"], text=True).strip())
    tools = [p for t in TOOLS if (p := f"/usr/bin/{t}") and os.path.exists(p)]
    dynload = [str(p) for p in (stdlib / "lib-dynload").glob("*.so")]
    seen = {"/work", "/tmp", "/proc", "/dev", "/etc"}  # made by hand below
    with tarfile.open(tar_path, "w") as tar:
        for top in ("bin", "lib", "lib64", "sbin"):  # Debian's merged /usr, as on the host
            if os.path.islink(f"/{top}"):
                info = tarfile.TarInfo(top)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{top}")
                tar.addfile(info)
        for d, mode in (("work", 0o755), ("tmp", 0o1777), ("proc", 0o555), ("dev", 0o755), ("etc", 0o755)):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/work:/bin/sh\n"
        group = b"root:x:0:\nnogroup:x:65534:\n"
        for name, data in (("etc/passwd", passwd), ("etc/group", group)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, __import__("io").BytesIO(data))
        for path in [python, real, *tools, *sorted(_libraries([real, *tools, *dynload]))]:
            _add(tar, path, seen)
        for root, dirs, files in os.walk(stdlib):
            dirs[:] = [d for d in dirs if d not in ("test", "idlelib", "tkinter", "turtledemo", "ensurepip")]
            for name in files:
                _add(tar, os.path.join(root, name), seen)


def build_image(image: str = DEFAULT_IMAGE, python: str = "/usr/bin/python3", say=print) -> str:
    """Build the sandbox image from this machine's system python, locally; returns its id."""
    client = _client()
    with tempfile.TemporaryDirectory(prefix="flywheel-image-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        build_rootfs(tar_path, python)
        say(f"rootfs: {os.path.getsize(tar_path) >> 20} MiB; importing as {image}")
        repo, _, tag = image.partition(":")
        client.api.import_image_from_file(tar_path, repository=repo, tag=tag or "latest")
    img = client.images.get(image)
    probe = client.containers.run(image, [python, "-I", "-c", "import json, ssl, sqlite3; print(6 * 7)"],
                                  network_mode="none", remove=True, user=f"{NOBODY}:{NOBODY}")
    if probe.strip() != b"42":
        raise RuntimeError(f"image {image} does not run python: {probe!r}")
    return img.id
