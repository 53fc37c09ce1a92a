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

Before a task is kept its image is probed, and its episodes run in one docker pool per
image, as for a workspace row naming an `image` (environments/sources/workspace_docker.py:
a python3 for the sandbox worker and bash, no VOLUME; the docker backend's isolation; the
image's ENV reaches every command and the hidden tests). The workspace is /work, as under
bwrap: the image's WORKDIR is copied there (a setup command, so workspace_run.py's
template keeps it once per task) and the task's scripts are rewritten as for bwrap.

Not done: several docker hosts (a task image is built on DOCKER_HOST's engine, and its
pool uses that engine alone); a bound on containers across task images (each pool keeps
up to `concurrency` warm); writes outside /work and /tmp (the root is read-only, and the
agent is not root); BuildKit-only Dockerfile syntax on an engine whose builder lacks it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import threading
from pathlib import Path

from flywheel.environments.sources import workspace_docker
from flywheel.environments.sources.workspace_docker import ImagePools, docker_reason
from flywheel.environments.verifiers.base import RowError

REPO = "flywheel-harbor"
BUILD_TIMEOUT_S = workspace_docker.CONNECT_TIMEOUT_S
BUILD_MEMORY = 2 << 30
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


class Engine(workspace_docker.Engine):
    """The docker engine task images are present on or built on (DOCKER_HOST)."""

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
        except Exception as exc:  # noqa: BLE001  (an engine error, or one lost meanwhile: the reason)
            raise docker_reason(exc) from None

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


__all__ = ["Engine", "ImagePools", "built", "content_hash", "copy_command", "from_images"]
