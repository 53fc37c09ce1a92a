"""The pool and workspace API on both backends: workspaces that live across steps and
reset cheaply, recycling, respawn inside a workspace, the docker container's settings,
bwrap's cgroups, and the config that picks a backend."""

from __future__ import annotations

from concurrent.futures import wait

import pytest

from flywheel.environments.sandbox import Job, Limits
from tests.sandbox_fixtures import BACKENDS, make_box, serves

LIMITS = Limits(wall_s=5, memory_mb=256, max_procs=32, file_size_mb=4, output_bytes=4096)
REPO = {"calc.py": "def add(a, b):\n    return a - b\n", "test_calc.py": "from calc import add\nassert add(2, 3) == 5\nprint('ok')\n"}


@pytest.fixture(scope="module", params=BACKENDS)
def box(request):
    box = make_box(request.param, LIMITS, concurrency=2, recycle_after=50)
    yield box
    box.close()


def test_workspace_holds_a_repository_across_steps_and_resets(box):
    with box.workspace(REPO) as ws:
        assert ws.run(["python", "test_calc.py"]).exit_code != 0  # the bug is there
        ws.put({"calc.py": "def add(a, b):\n    return a + b\n"})  # step 1: the fix
        ws.run(["sh", "-c", "echo notes > notes.txt; mkdir -p build; echo o > build/out"])  # step 2
        res = ws.run(["python", "test_calc.py"])  # step 3 sees both
        assert res.exit_code == 0 and res.stdout.strip() == "ok"
        assert ws.read_file("notes.txt").strip() == "notes"
        ws.reset()  # back to the files given at acquire
        assert sorted(ws.run(code="import os; print(sorted(os.listdir('.')))").stdout.split("'")[1::2]) == sorted(REPO)
        assert "a - b" in ws.read_file("calc.py")
        ws.put({"calc.py": "def add(a, b):\n    return a + b\n"})
        ws.snapshot()  # a new starting point
        ws.run(["rm", "calc.py"])
        ws.reset()
        assert ws.run(["python", "test_calc.py"]).stdout.strip() == "ok"
        with pytest.raises(ValueError):
            ws.read_file("../etc/passwd")
    assert serves(box)


def test_released_workspace_leaves_nothing_for_the_next(box):
    with box.workspace({"secret.txt": "from a previous trajectory"}) as ws:
        ws.run(["sh", "-c", "echo x > /tmp/left"])
    for _ in range(4):  # whichever worker comes next
        res = box.run(Job(["sh", "-c", "ls -A /work /tmp"]))
        assert "secret" not in res.stdout and "left" not in res.stdout


def test_workspace_survives_its_worker_dying(box):
    with box.workspace(REPO) as ws:
        ws.put({"calc.py": "def add(a, b):\n    return a + b\n"})
        ws.worker.transport.kill()
        res = ws.run(["python", "test_calc.py"])
        assert res.error and "died" in res.error  # the step in flight is an infra error
        res = ws.run(["python", "test_calc.py"])  # then a fresh worker, from the starting files
        assert ws.lost == 1 and res.error is None and res.exit_code != 0
    assert serves(box)


def test_workers_are_recycled_after_n_executions(box):
    """Worn workers are killed and replaced in the background (never more live workers
    than the pool's size), and every job still gets its own result."""
    before = box.spawned
    results = box.map([Job(["python", "-c", f"print({i})"]) for i in range(120)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(120)]
    assert box.spawned >= before + 2  # 120 executions over 2 workers, recycled every 50
    for _ in range(3):
        assert box.run(Job(["python", "-c", "pass"])).exit_code == 0
    wait(list(box._background))  # the last replacements and kills
    assert len(box._all) <= box.concurrency and not box._warming
    assert box.idle_leftovers() == []


def test_map_queues_jobs_and_loses_none_when_a_worker_dies(box):
    """map() keeps a second job queued on each worker; when the worker dies under the first
    (killed from the host here), only that one reports it: the queued one never started
    and runs on a fresh worker."""
    import threading

    jobs = [Job(["python", "-c", "import time; time.sleep(1.5)"])]
    jobs += [Job(["python", "-c", f"print({i})"]) for i in range(1, 6)]
    one = make_box(box.name, LIMITS, concurrency=1)
    try:
        one.warm()
        killer = threading.Timer(0.7, next(iter(one._all)).transport.kill)
        killer.start()
        results = one.map(jobs)
        killer.join()
        assert results[0].error and "died" in results[0].error
        assert [r.stdout.strip() for r in results[1:]] == ["1", "2", "3", "4", "5"]
        assert all(r.error is None for r in results[1:]) and one.spawned == 2
        assert one.idle_leftovers() == []
    finally:
        one.close()


def test_map_sees_replies_read_ahead(box):
    """With two jobs on a worker, reading one reply may take the next one along (here the
    host is made slow to read the first); map() must not then wait on the pipe for it:
    it would sit there until wall + grace."""
    import time

    one = make_box(box.name, LIMITS, concurrency=1)
    try:
        one.warm()
        transport = next(iter(one._all)).transport
        recv, calls = transport.recv, []

        def slow_first(n, deadline):
            if not calls:
                time.sleep(0.5)  # the queued job runs and answers meanwhile
            calls.append(n)
            return recv(n, deadline)

        transport.recv = slow_first
        t0 = time.monotonic()
        results = one.map([Job(["python", "-c", "print(0)"]), Job(["python", "-c", "print(1)"])])
        assert [r.stdout.strip() for r in results] == ["0", "1"]
        assert time.monotonic() - t0 < LIMITS.wall_s  # ~0.5 s, unless the second waited for its deadline
    finally:
        one.close()


def test_map_does_not_queue_large_jobs(box):
    """A job is queued behind another only when both are small (together they fit in the
    pipe, so sending never blocks); large ones go to idle workers, and all complete."""
    from flywheel.environments.sandbox.pool import _Lane

    small, big = Job(["python", "-c", "pass"]), Job(["python", "-c", "pass"], stdin="x" * 40000)
    box.warm()
    lane = _Lane(next(iter(box._all)))  # only looked at, not used
    assert box._can_queue(lane, big)  # an idle worker takes anything
    lane.queue.append((0, 1.0, True))
    assert box._can_queue(lane, small) and not box._can_queue(lane, big)
    lane.queue[0] = (0, 1.0, False)
    assert not box._can_queue(lane, small)
    code = "import sys; print(len(sys.stdin.read()))"
    results = box.map([Job(["python", "-c", code], stdin="x" * 40000) for _ in range(6)])
    assert [r.stdout.strip() for r in results] == ["40000"] * 6


def test_code_and_argv_forms(box):
    with box.workspace() as ws:
        assert ws.run(code="import sys; print(sys.argv, __name__)").stdout.strip() == "['-c'] __main__"
        ws.put({"s.py": "import sys; print(sys.argv[1:], sys.stdin.read())"})
        assert ws.run(["python", "s.py", "a"], stdin="in").stdout.strip() == "['a'] in"
        assert ws.run(["python", "-c", "raise SystemExit(3)"]).exit_code == 3
        assert ws.run(["python", "-c", "1/0"]).exit_code == 1
        assert ws.run(["python", "-c", "syntax error here"]).exit_code == 1
        assert ws.run(["python", "-m", "json.tool"], stdin="[1]").stdout.split() == ["[", "1", "]"]  # exec'd
        assert ws.run(["no-such-program"]).exit_code == 127


def test_docker_container_settings():
    box = make_box("docker", LIMITS, concurrency=1)
    try:
        box.warm()
        t = next(iter(box._all)).transport
        t.container.reload()
        host, cfg = t.container.attrs["HostConfig"], t.container.attrs["Config"]
        assert host["Memory"] == host["MemorySwap"] > 0 and host["PidsLimit"] == LIMITS.max_procs + 8
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"] and set(host["Tmpfs"]) == {"/work", "/tmp"}
        assert cfg["User"] == "65534:65534" and not any(e.startswith("AWS") for e in cfg["Env"])
        # the protocol's socket: one read-only mount, nothing else of the host's
        assert [(m["Destination"], m["RW"]) for m in t.container.attrs["Mounts"]] == [("/flywheel", False)]
        assert not t.framed and not cfg["OpenStdin"]
    finally:
        box.close()


def test_docker_attach_transport_serves_and_recycles():
    """`docker_transport: attach` (an engine elsewhere): docker's attach stream, no mount."""
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig

    make_box("docker", LIMITS, 1).close()  # skips (or fails under CI) without an engine
    box = make_sandbox(SandboxConfig(backend="docker", concurrency=2, recycle_after=20, docker_transport="attach"))
    try:
        results = box.map([Job(["python", "-c", f"print({i})"]) for i in range(50)])
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(50)] and box.spawned >= 3
        t = next(iter(box._all)).transport
        t.container.reload()
        assert t.framed and t.container.attrs["Mounts"] == [] and t.container.attrs["Config"]["OpenStdin"]
        assert box.idle_leftovers() == []
    finally:
        box.close()


def test_bwrap_workers_get_cgroup_limits():
    box = make_box("bwrap", LIMITS, concurrency=1)
    try:
        if not box.cgroup_roots:
            pytest.skip("cgroup v1 memory/pids not writable here: rlimits only")
        box.warm()
        t = next(iter(box._all)).transport
        mem, pids = t.cgroups
        assert int((mem / "memory.limit_in_bytes").read_text()) < (LIMITS.memory_mb + 1024) << 20
        assert int((pids / "pids.max").read_text()) == LIMITS.max_procs + 8
        assert str(t.proc.pid) in (pids / "cgroup.procs").read_text().split() or (pids / "cgroup.procs").read_text()
    finally:
        box.close()
    assert not t.cgroups[0].exists() and not t.cgroups[1].exists()


def test_make_sandbox_picks_the_configured_backend():
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig

    box = make_sandbox(SandboxConfig(concurrency=1))
    assert box.name == "bwrap" and box.safe and serves(box)
    box.close()
    make_box("docker", LIMITS, 1).close()  # skips (or fails under CI) without an engine
    box = make_sandbox(SandboxConfig(backend="docker", concurrency=1, recycle_after=7))
    assert box.name == "docker" and box.recycle_after == 7 and serves(box)
    box.close()


def test_process_backend_workspace_is_unsafe_but_works(tmp_path):
    from flywheel.environments.sandbox.process import ProcessSandbox

    with pytest.warns(UserWarning, match="WITHOUT isolation"):
        box = ProcessSandbox(LIMITS, 1)
    with box.workspace(REPO) as ws:
        ws.put({"calc.py": "def add(a, b):\n    return a + b\n"})
        assert ws.run(["python", "test_calc.py"]).stdout.strip() == "ok"
        ws.reset()
        assert ws.run(["python", "test_calc.py"]).exit_code != 0
