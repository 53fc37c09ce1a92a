"""Harbor tasks in containers of their own image (environments/sources/harbor.py decides
which tasks: those whose image is there or builds here from local layers).

The image: a task.toml `docker_image` that the engine already has is used as it is;
otherwise the task's `environment/` directory is built as it stands (the docker SDK, the
engine's own builder) with the network off during the build and nothing pulled: every
FROM image must already be present locally. Its tag, `flywheel-harbor:<hash>`, hashes the
directory's files and the FROM images' ids, so a task is built once per content (a second
load, another process, finds the tag) and a rebuilt base image makes a new one. The build
runs the Dockerfile's RUN lines as Docker runs them (in the engine's build containers,
offline): the task author's code, never the model's.

Before a task is kept its image is probed, in a container as the sandbox runs them (user
65534, no network, read-only root): a python3 that compiles the sandbox worker
(/usr/bin/python3, else /usr/local/bin/python3: the worker is a python fork-server) and a
bash on the image's PATH (the tools and the tests run bash). An image that declares a
VOLUME is refused: docker would mount a writable volume there, outside the sandbox's tmpfs.

The episodes: one DockerSandbox pool per image (`ImagePools`: made at the image's first
episode with the run sandbox's limits and concurrency, closed with the domain), so every
container follows the docker backend's rules (docker_backend.py: user 65534, network
none, read-only root, /work and /tmp as tmpfs, capabilities dropped, memory and pids
limits, each command killed with its children at its limit). The image's ENV reaches every
command and the hidden tests; its USER, ENTRYPOINT, CMD and HEALTHCHECK are not used. The
workspace is /work, as under bwrap: the image's WORKDIR is copied there (a setup command,
so workspace_run.py's template keeps it once per task) and the task's scripts are
rewritten as for bwrap.

Not done: several docker hosts (a task image is built on DOCKER_HOST's engine, and its
pool uses that engine alone); a bound on containers across task images (each pool keeps
up to `concurrency` warm); writes outside /work and /tmp (the root is read-only, and the
agent is not root); BuildKit-only Dockerfile syntax on an engine whose builder lacks it.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shlex
import threading
import weakref
from pathlib import Path

from flywheel.environments.verifiers.base import RowError

REPO = "flywheel-harbor"
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
BUILD_TIMEOUT_S = 900
BUILD_MEMORY = 2 << 30
# compiles the worker (argv[1]) and imports what it needs, then says where bash is
PROBE = ("import sys, shutil, marshal, resource, _socket; compile(sys.argv[1], 'sandbox-worker', 'exec'); "
         "print('bash=' + (shutil.which('bash') or ''))")  # fmt: skip
COPY = """import os, shutil
w = {workdir!r}
if os.path.isdir(w):
    for e in os.scandir(w):
        if e.is_dir(follow_symlinks=False):
            shutil.copytree(e.path, "/work/" + e.name, symlinks=True)
        else:
            shutil.copy2(e.path, "/work/" + e.name, follow_symlinks=False)
"""

built: list[str] = []  # the tags this process built (the tests count them)
_facts: dict[str, dict] = {}  # image id -> what the probe found
_build_lock = threading.Lock()


def from_images(lines: list[tuple[str, str]]) -> list[str]:
    """The images a Dockerfile's FROM lines name (not its own stages, not scratch)."""
    stages, out = {"scratch"}, []
    for word, rest in lines:
        if word != "FROM":
            continue
        args = [a for a in rest.split() if not a.startswith("--")]
        if not args or "$" in args[0]:
            raise RowError(f"FROM {rest[:60]} names its image through a build argument")
        if args[0].lower() not in stages:
            out.append(args[0])
        if len(args) >= 3 and args[1].lower() == "as":
            stages.add(args[2].lower())
    return out


def content_hash(env_dir: Path, base_ids: list[str]) -> str:
    """A hash of the build context (names, contents, exec bits, links) and the base images."""
    h = hashlib.sha256("\0".join(base_ids).encode())
    for root, dirs, files in os.walk(env_dir):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, env_dir)
            if os.path.islink(p):
                h.update(f"\0L{rel}\0{os.readlink(p)}".encode())
            elif os.path.isfile(p):
                data = Path(p).read_bytes()
                h.update(f"\0F{rel}\0{os.stat(p).st_mode & 0o111}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:24]


def copy_command(container: dict) -> str:
    """The setup command that puts the image's WORKDIR into the workspace."""
    code = COPY.format(workdir=container["workdir"])
    return f"{shlex.quote(container['python'])} -I -c {shlex.quote(code)}"


class Engine:
    """The docker engine task images are built on (DOCKER_HOST): asked once per domain load."""

    def __init__(self):
        self.client, self.problem = None, None
        try:
            from flywheel.environments.sandbox.docker_backend import docker_unavailable
            from flywheel.environments.sandbox.docker_hosts import connect

            self.problem = docker_unavailable()
            if self.problem is None:
                self.client = connect(timeout=BUILD_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001  (no SDK, an engine that stops answering: the reason)
            self.problem = f"{type(exc).__name__}: {exc}"

    def container(self, env_dir: Path, lines, docker_image: str | None) -> dict:
        """{"image", "python", "workdir", "env"} of the task's own container; RowError why
        there is none (the reason starts "docker: ")."""
        if self.client is None:
            raise RowError(f"docker: {self.problem}")
        try:
            image = None
            if docker_image:  # Harbor's rule: a task.toml image stands in for the Dockerfile
                try:
                    image = self._present(docker_image, "the prebuilt image")
                except RowError:
                    if lines is None:
                        raise
            if image is None:
                image = self._build(env_dir, lines)
            return self._probe(image)
        except RowError as exc:
            raise RowError(str(exc) if str(exc).startswith("docker: ") else f"docker: {exc}") from None
        except Exception as exc:  # noqa: BLE001  (an engine error, or one lost meanwhile: the reason)
            raise RowError(f"docker: {type(exc).__name__}: {str(exc)[:300]}") from None

    def _present(self, name: str, what: str):
        import docker

        try:
            return self.client.images.get(name)
        except docker.errors.ImageNotFound:
            raise RowError(f"{what} {name} is not present locally (nothing is pulled)") from None

    def _build(self, env_dir: Path, lines):
        import docker

        bases = [self._present(b, "its FROM image").id for b in from_images(lines)]
        tag = f"{REPO}:{content_hash(env_dir, bases)}"
        with _build_lock:
            try:
                return self.client.images.get(tag)
            except docker.errors.ImageNotFound:
                pass
            try:
                image, _ = self.client.images.build(
                    path=str(env_dir), tag=tag, network_mode="none", pull=False, rm=True, forcerm=True,
                    timeout=BUILD_TIMEOUT_S, container_limits={"memory": BUILD_MEMORY, "memswap": BUILD_MEMORY},
                )  # fmt: skip
            except docker.errors.BuildError as exc:
                log = "".join(str(x.get("stream", "")) for x in exc.build_log if isinstance(x, dict))
                raise RowError(
                    f"its image does not build offline: {exc.msg} ({log.strip()[-200:]})"
                ) from None
            built.append(tag)
            return image

    def _probe(self, image) -> dict:
        config = image.attrs.get("Config") or {}
        name = (image.tags or [image.id])[0]
        if config.get("Volumes"):
            raise RowError(f"its image declares VOLUME {', '.join(config['Volumes'])} (a writable mount)")
        env = dict(e.partition("=")[::2] for e in config.get("Env") or [])
        if image.id not in _facts:
            tried = []
            for python in PYTHONS:
                code, out = self._run(image.id, python, env)
                if code is None or code != 0:
                    tried.append(f"{python}: {out.strip()[-160:]}")
                    continue
                if "bash=/" not in out:
                    raise RowError(f"its image {name} has no bash on its PATH (the tools and tests run bash)")
                _facts[image.id] = {"python": python}
                break
            else:
                raise RowError(
                    f"its image {name} has no python3 to host the sandbox worker ({'; '.join(tried)})"
                )
        return {"image": name, "python": _facts[image.id]["python"],
                "workdir": (config.get("WorkingDir") or "").rstrip("/") or "/app", "env": env}  # fmt: skip

    def _run(self, image_id: str, python: str, env: dict) -> tuple[int | None, str]:
        """(exit code or None when it did not start, its output) of the probe with `python`,
        in a container as the sandbox runs them, removed whatever happened."""
        import docker

        from flywheel.environments.sandbox.docker_image import NOBODY
        from flywheel.environments.sandbox.protocol import WORKER_SOURCE

        c = self.client.containers.create(
            image_id, ["-I", "-c", PROBE, WORKER_SOURCE], entrypoint=[python], user=f"{NOBODY}:{NOBODY}",
            network_mode="none", network_disabled=True, read_only=True, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], mem_limit="256m", working_dir="/",
            environment={"PATH": "/usr/bin:/bin", **env}, healthcheck={"test": ["NONE"]},
        )  # fmt: skip
        try:
            try:
                c.start()
            except docker.errors.APIError as exc:  # no such executable, as a rule
                return None, str(exc.explanation or exc)
            code = c.wait(timeout=120)["StatusCode"]
            return code, c.logs(stdout=True, stderr=code != 0).decode(errors="replace")
        finally:
            c.remove(force=True)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


_open_pools: weakref.WeakSet = weakref.WeakSet()


class ImagePools:
    """One docker sandbox pool per task image, made at its first workspace, with the
    limits and concurrency of the sandbox the run gave (`like`)."""

    def __init__(self):
        self._pools: dict[str, object] = {}
        self._lock = threading.Lock()
        _open_pools.add(self)

    def get(self, container: dict, like):
        from flywheel.environments.sandbox.docker_backend import DockerSandbox

        with self._lock:
            pool = self._pools.get(container["image"])
            if pool is None:
                pool = DockerSandbox(like.limits, max(1, like.concurrency), python=container["python"],
                                     recycle_after=getattr(like, "recycle_after", 0) or 10_000,
                                     image=container["image"], env=container["env"])  # fmt: skip
                self._pools[container["image"]] = pool
            return pool

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


@atexit.register
def _close_all() -> None:
    for pools in list(_open_pools):
        pools.close()
