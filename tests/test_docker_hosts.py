"""Two real docker engines behind one sandbox pool: the image is built on both, the pool
spreads over both, one engine is stopped in the middle of a stream of verifications and
started again, and every job gets exactly one result.

A paused engine (hung: its socket there, nothing answering) is dropped only after
repeated time-outs and taken back when it answers again.

The module starts its own two private dockerd instances (scripts/dockerd.sh with a
directory each: own data-root, exec-root, containerd, socket, pidfile, no bridge) and
stops them at the end, checking that no engine process, container or mount is left.
They skip when dockerd is not installed, and fail instead under FLYWHEEL_REQUIRE_DOCKER=1
(as CI runs them). `pytest -s` prints the failover measurements.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from flywheel.environments.sandbox import Job, Limits, make_sandbox
from flywheel.environments.sandbox.docker_backend import DEFAULT_IMAGE, LABEL, DockerSandbox, docker_unavailable
from flywheel.environments.sandbox.docker_hosts import HEALTH_TIMEOUT_S, SLOW_TO_DOWN, connect
from flywheel.config import SandboxConfig
from tests.sandbox_fixtures import host_processes_with, serves

REPO = Path(__file__).resolve().parents[1]
SUDO = [] if os.geteuid() == 0 else ["sudo"]
LIMITS = Limits(wall_s=5, memory_mb=256, max_procs=32, file_size_mb=4, output_bytes=4096)
# Each job reports its own index and the container it ran in (a container's hostname is
# the first 12 characters of its id); the sleep keeps jobs in flight when a host goes.
WHERE = "import socket, time; i = input(); time.sleep(0.5); print(i, socket.gethostname())"


def ran_on(box, res) -> str | None:
    """The host a job ran on: it printed its container's hostname, the id's first 12 characters."""
    parts = res.stdout.split()
    if res.error or len(parts) != 2:
        return None
    return next((host for cid, host in box.placement.items() if cid.startswith(parts[1])), None)


def need_engines(why: str):
    if os.environ.get("FLYWHEEL_REQUIRE_DOCKER"):
        pytest.fail(f"FLYWHEEL_REQUIRE_DOCKER is set but {why}")
    pytest.skip(why)


class Engine:
    """One private dockerd, all of it under `dir` (scripts/dockerd.sh start|stop DIR)."""

    def __init__(self, dir: Path):
        self.dir = dir
        self.url = f"unix://{dir}/docker.sock"

    def start(self) -> None:
        out = subprocess.run(["bash", str(REPO / "scripts/dockerd.sh"), "start", str(self.dir)],
                             capture_output=True, text=True, timeout=240)  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"dockerd in {self.dir} did not start: {out.stderr[-2000:]}")

    def go_away(self) -> None:
        """The host goes away: its dockerd is stopped (SIGTERM; it closes its socket,
        stops its containers and exits), nothing of ours is removed first."""
        pid = int((self.dir / "docker.pid").read_text())
        subprocess.run([*SUDO, "kill", "-TERM", str(pid)], check=True)
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}"), "dockerd did not stop within 60 s"

    def stop(self) -> None:
        subprocess.run(["bash", str(REPO / "scripts/dockerd.sh"), "stop", str(self.dir)],
                       capture_output=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def engines():
    if not shutil.which("dockerd") or not shutil.which("docker"):
        need_engines("dockerd is not installed (`bash scripts/dockerd.sh start` installs docker.io)")
    if SUDO and not shutil.which("sudo"):
        need_engines("starting dockerd needs root or sudo")
    # short: a unix socket path has at most 107 bytes, containerd's sit under exec-root
    root = Path(tempfile.mkdtemp(prefix="fw-dockerd-"))
    pair = [Engine(root / "a"), Engine(root / "b")]
    try:
        try:
            for e in pair:
                e.start()
        except RuntimeError as exc:
            need_engines(str(exc))
        # the image on both, by the command CI and users run
        out = subprocess.run([sys.executable, "-m", "flywheel.cli", "sandbox", "build-image",
                              "--host", pair[0].url, "--host", pair[1].url],
                             cwd=REPO, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        yield pair
    finally:
        for e in pair:
            e.stop()
        time.sleep(0.5)
        left = host_processes_with(str(root))  # dockerd, its containerd, container shims
        mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines() if str(root) in ln]
        for m in reversed(mounts):
            subprocess.run([*SUDO, "umount", "-l", m], capture_output=True)
        subprocess.run([*SUDO, "rm", "-rf", str(root)], capture_output=True)
        assert not left and not mounts, f"left behind: processes {left}, mounts {mounts}"
        assert not root.exists(), f"{root} could not be removed"


def test_build_image_puts_the_image_on_every_host(engines):
    for e in engines:
        client = connect(e.url)
        try:
            out = client.containers.run(DEFAULT_IMAGE, ["/usr/bin/python3", "-I", "-c", "print(6 * 7)"],
                                        network_mode="none", remove=True, user="65534:65534")  # fmt: skip
            assert out.strip() == b"42"
        finally:
            client.close()


def test_unreachable_hosts_are_named_and_skipped(engines, tmp_path):
    gone = [f"unix://{tmp_path}/gone-{i}.sock" for i in range(2)]
    with pytest.raises(RuntimeError, match="no healthy docker host") as err:
        DockerSandbox(LIMITS, 1, hosts=gone)
    assert all(g in str(err.value) for g in gone) and "No such file" in str(err.value)
    assert gone[0] in docker_unavailable(gone) and docker_unavailable([gone[0], engines[0].url]) is None
    with pytest.raises(RuntimeError, match="missing: run `flywheel sandbox build-image`"):
        DockerSandbox(LIMITS, 1, hosts=[engines[0].url], image="flywheel-sandbox:no-such-tag")
    box = DockerSandbox(LIMITS, 2, hosts=[gone[0], engines[0].url])
    try:
        box.warm()
        assert serves(box) and set(box.placement.values()) == {engines[0].url}
        assert not box.hosts.hosts[0].healthy and gone[0] in box.hosts.none_healthy()
    finally:
        box.close()


def test_failover_when_a_host_goes_away_and_rejoin_when_it_comes_back(engines):
    a, b = engines
    box = make_sandbox(SandboxConfig(backend="docker", docker_hosts=[a.url, b.url], concurrency=4, wall_s=5))
    box.warm()
    assert [h.live for h in box.hosts.hosts] == [2, 2]  # the slots are spread
    runs: list[tuple[int, float, float, object]] = []  # (job, started, finished, result)
    issued, stop, counter = [], threading.Event(), itertools.count()

    def stream():
        while not stop.is_set():
            i = next(counter)
            issued.append(i)
            t0 = time.monotonic()
            res = box.run(Job(["python", "-c", WHERE], stdin=str(i)))
            runs.append((i, t0, time.monotonic(), res))

    def wait_for(cond, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    threads = [threading.Thread(target=stream) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(runs) >= 24, 120, "24 jobs before the loss")
        t_loss = time.monotonic()
        a.go_away()
        wait_for(lambda: sum(r[1] > t_loss for r in runs) >= 40, 120, "40 jobs after the loss")
        t_restart = time.monotonic()
        a.start()
        wait_for(lambda: box.hosts.hosts[0].healthy, 30, "the host to be admitted again")
        t_up = max(t for t, name, kind, _ in box.hosts.events if name == a.url and kind == "up")
        back = lambda: sum(r[1] > t_up and ran_on(box, r[3]) == a.url for r in runs)  # noqa: E731
        wait_for(lambda: back() >= 8, 120, "8 jobs on it again")
    finally:
        stop.set()
        for t in threads:
            t.join()
        retried = box.retried
        box.close()

    # every job exactly one result, its own, none an error
    assert sorted(r[0] for r in runs) == sorted(issued) == list(range(len(issued)))
    lost = [r for r in runs if r[3].error or r[3].stdout.split()[:1] != [str(r[0])]]
    assert lost == [], f"jobs without their result: {[(r[0], r[3].error) for r in lost[:5]]}"
    where = {r[0]: ran_on(box, r[3]) for r in runs}
    assert None not in where.values()
    t_down = next(t for t, name, k, _ in box.hosts.events if name == a.url and k == "down" and t > t_loss)
    assert {where[r[0]] for r in runs if r[2] < t_loss} == {a.url, b.url}  # both served before
    outage = [r for r in runs if t_down < r[1] < t_up]
    assert outage and {where[r[0]] for r in outage} == {b.url}  # all later jobs on the survivor
    assert retried >= 1  # jobs in flight on the lost host were run again, not lost
    assert {where[r[0]] for r in runs if r[1] > t_up} == {a.url, b.url}  # used again after it came back

    caught = [r for r in runs if r[1] < t_down < r[2]]  # in flight when the host was cut
    after = sorted(r[2] for r in runs if r[2] > t_loss)
    normal = statistics.median(r[2] - r[1] for r in runs if r[2] < t_loss)
    print(f"\nfailover: {len(runs)} jobs, {retried} retried, {len(lost)} lost; host loss -> marked down "
          f"{t_down - t_loss:.2f} s; -> last caught job answered {max(r[2] for r in caught) - t_loss:.2f} s "
          f"(latency of a caught job up to {max(r[2] - r[1] for r in caught):.2f} s, "
          f"median job {normal:.2f} s); longest time without a result after the loss "
          f"{max(y - x for x, y in itertools.pairwise(after)):.2f} s; "
          f"engine restart begun -> host admitted again {t_up - t_restart:.2f} s; "
          f"workers retired to rebalance {box.retired}")
    for e in engines:  # the pool left nothing on either engine
        client = connect(e.url)
        try:
            assert client.containers.list(all=True, filters={"label": LABEL}) == []
        finally:
            client.close()


def test_a_hung_engine_is_dropped_only_after_repeated_time_outs(engines):
    a, b = engines
    box = DockerSandbox(LIMITS, 2, hosts=[a.url, b.url])
    pid = int((b.dir / "docker.pid").read_text())

    def event(kind: str, after: float) -> float | None:
        return next((t for t, n, k, _ in box.hosts.events if n == b.url and k == kind and t > after), None)

    try:
        box.warm()
        t_pause = time.monotonic()
        subprocess.run([*SUDO, "kill", "-STOP", str(pid)], check=True)  # hung: the socket is there
        try:
            while event("down", t_pause) is None:
                assert time.monotonic() - t_pause < 60, "a hung engine was never dropped"
                time.sleep(0.1)
            t_down = event("down", t_pause)
            during = [box.run(Job(["python", "-c", WHERE], stdin=str(i))) for i in range(4)]
        finally:
            subprocess.run([*SUDO, "kill", "-CONT", str(pid)], check=True)
        # not at the first time-out (that is within one interval + one timeout, ~3 s): after
        # at least two whole checks that timed out, ~8 s
        assert t_down - t_pause >= 2 * (box.hosts.interval_s + box.hosts.timeout_s)
        assert {ran_on(box, r) for r in during} == {a.url}  # served meanwhile, by the other
        deadline = time.monotonic() + 60  # used at its concurrency, the pool needs a second worker: on b
        while b.url not in {ran_on(box, r) for r in box.map([Job(["python", "-c", WHERE], stdin="0")] * 2)}:
            assert time.monotonic() < deadline, "the engine was not used again after it answered"
        print(f"\nhung engine: dropped {t_down - t_pause:.1f} s after it stopped answering "
              f"({SLOW_TO_DOWN} time-outs of {HEALTH_TIMEOUT_S:.0f} s), used again after SIGCONT")
    finally:
        box.close()
