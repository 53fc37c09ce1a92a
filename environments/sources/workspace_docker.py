"""Workspace tasks in containers of a task's own image: the parts a `file:` workspace row
naming an `image` (environments/sources/workspace_tasks.py) and a Harbor task
(environments/sources/harbor_docker.py, which adds building one) share.

The image must already be on the engine (DOCKER_HOST): it is never pulled. Before a row is
kept its image is probed, in a container as the sandbox runs them (user 65534, no network,
read-only root): a python3 that compiles the sandbox worker (/usr/bin/python3, else
/usr/local/bin/python3: the worker is a python fork-server) and a bash on the image's PATH
(the tools and the tests run bash). An image that declares a VOLUME is refused: docker
would mount a writable volume there, outside the sandbox's tmpfs. Each reason starts
"docker: ", so the quarantine says which part failed.

The episodes: one DockerSandbox pool per image (`ImagePools`: made at the image's first
episode with the run sandbox's limits and concurrency, closed with the domain), so every
container follows the docker backend's rules (docker_backend.py: user 65534, network
none, read-only root, /work and /tmp as tmpfs, capabilities dropped, memory and pids
limits, each command killed with its children at its limit). The image's ENV reaches every
command and the hidden tests; its USER, ENTRYPOINT, CMD and HEALTHCHECK are not used.

Not done: several docker hosts (one engine, DOCKER_HOST's); a bound on containers across
images (each pool keeps up to `concurrency` warm); writes outside /work and /tmp.
"""

from __future__ import annotations

import atexit
import threading
import weakref

from flywheel.environments.verifiers.base import RowError

PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
CONNECT_TIMEOUT_S = 900  # a build (harbor_docker.py) answers only when it is done
# compiles the worker (argv[1]) and imports what it needs, then says where bash is
PROBE = ("import sys, shutil, marshal, resource, _socket; compile(sys.argv[1], 'sandbox-worker', 'exec'); "
         "print('bash=' + (shutil.which('bash') or ''))")  # fmt: skip

_facts: dict[str, dict] = {}  # image id -> what the probe found


def docker_reason(exc: Exception) -> RowError:
    """`exc` as a RowError whose text starts "docker: "."""
    if isinstance(exc, RowError):
        return RowError(str(exc) if str(exc).startswith("docker: ") else f"docker: {exc}")
    return RowError(f"docker: {type(exc).__name__}: {str(exc)[:300]}")


class Engine:
    """The docker engine of DOCKER_HOST: asked once per domain load."""

    def __init__(self):
        self.client, self.problem = None, None
        try:
            from flywheel.environments.sandbox.docker_backend import docker_unavailable
            from flywheel.environments.sandbox.docker_hosts import connect

            self.problem = docker_unavailable()
            if self.problem is None:
                self.client = connect(timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001  (no SDK, an engine that stops answering: the reason)
            self.problem = f"{type(exc).__name__}: {exc}"

    def present(self, name: str) -> dict:
        """{"image", "python", "workdir", "env"} of image `name` (a workspace row's), present
        and probed; RowError "cannot run here: ..." why it cannot host the sandbox."""
        try:
            if self.client is None:
                raise RowError(f"docker: {self.problem}")
            return self._probe(self._present(name, "the image"))
        except Exception as exc:  # noqa: BLE001  (an engine error, or one lost meanwhile: the reason)
            raise RowError(f"cannot run here: the container image {name!r} ({docker_reason(exc)})") from None

    def _present(self, name: str, what: str):
        import docker

        try:
            return self.client.images.get(name)
        except docker.errors.ImageNotFound:
            raise RowError(f"{what} {name} is not present locally (nothing is pulled)") from None

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
