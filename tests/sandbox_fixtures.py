"""Sandbox pools for the tests, one per backend, real bwrap and a real dockerd.

Docker tests skip with the reason when no engine is reachable (a developer without
docker can still run the suite); `.ci/run` sets FLYWHEEL_REQUIRE_DOCKER=1 so that in CI
a missing engine fails instead of skipping.
"""

from __future__ import annotations

import os
import secrets

import pytest

from flywheel.environments.sandbox import Job, Limits

BACKENDS = ["bwrap", "docker"]
# The escape suite's limits, and a canary planted in the environment its pools start from.
LIMITS = Limits(wall_s=3, cpu_s=3, memory_mb=256, max_procs=24, file_size_mb=4, output_bytes=4096)
CANARY = "flywheel-canary-" + secrets.token_hex(8)


def make_box(backend: str, limits: Limits, concurrency: int, **kw):
    if backend == "bwrap":
        from flywheel.environments.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(limits, concurrency, **kw)
    from flywheel.environments.sandbox.docker_backend import DockerSandbox, docker_unavailable
    from flywheel.environments.sandbox.docker_image import DEFAULT_IMAGE, build_image

    why = docker_unavailable()
    if why:
        if os.environ.get("FLYWHEEL_REQUIRE_DOCKER"):
            pytest.fail(f"FLYWHEEL_REQUIRE_DOCKER is set but {why}")
        pytest.skip(why)
    import docker

    try:
        docker.from_env().images.get(DEFAULT_IMAGE)
    except docker.errors.ImageNotFound:
        build_image(DEFAULT_IMAGE, say=lambda *_: None)
    return DockerSandbox(limits, concurrency, **kw)


def host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes containing marker: the sandboxes share our kernel,
    so anything left behind in any of them shows here."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def serves(box) -> bool:
    res = box.run(Job(["python", "-c", "print(6 * 7)"]))
    return res.error is None and res.stdout.strip() == "42"

def py(box, code, **kw):
    return box.run(Job(["python", "-c", code], **kw))
