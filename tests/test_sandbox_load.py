"""Load: 1,000 verifications at concurrency 16 through the pool, with some hostile jobs
mixed in, leave no process, file descriptor, temp dir or cgroup behind (the bench runs
10,000: bench/sandbox.py)."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from flywheel.environments import get_environment
from flywheel.environments.sandbox import Job, Limits
from tests.sandbox_fixtures import BACKENDS, host_processes_with, make_box

N, CONCURRENCY = 1000, 16


def descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                out.update(kids)
                todo += kids
        except OSError:
            pass
    return out


def snapshot() -> dict:
    tmp = tempfile.gettempdir()
    return {
        "children": descendants(os.getpid()),
        "fds": len(os.listdir("/proc/self/fd")),
        "tmp": {e for e in os.listdir(tmp) if e.startswith("flywheel")},
    }


def verification_jobs(n: int) -> list[Job]:
    env = get_environment("code")
    tasks = env.make_tasks("train", 1, seed=3, count=20)
    jobs = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        if i % 100 == 7:  # a detached child that must not outlive its execution
            jobs.append(Job(["python", "-c", "import subprocess; subprocess.Popen(['sleep', '417'], start_new_session=True)"]))
            continue
        import json

        entry = json.loads(task.verifier_json)["entry"]
        body = "return None" if i % 3 else "raise ValueError('wrong')"
        jobs.append(env.job(task, f"```python\ndef {entry}(*a):\n    {body}\n```"))
    return jobs


@pytest.mark.parametrize("backend", BACKENDS)
def test_thousand_executions_leave_nothing_behind(backend):
    before = snapshot()
    jobs = verification_jobs(N)
    box = make_box(backend, Limits(wall_s=10), CONCURRENCY)
    try:
        box.warm()
        t0 = time.monotonic()
        results = box.map(jobs)
        elapsed = time.monotonic() - t0
        assert all(r.error is None for r in results), [r.error for r in results if r.error][:3]
        assert sum("nonce" not in j.stdin for j in jobs) == 10
        verdicts = [r.stdout for r, j in zip(results, jobs) if "nonce" in j.stdin]
        assert all(v.count("\"outputs\"") == 1 for v in verdicts)  # every harness reported
        assert box.idle_leftovers() == []
        print(f"{backend}: {N} executions at concurrency {CONCURRENCY} in {elapsed:.1f}s ({N / elapsed:.0f}/s)")
    finally:
        box.close()
    time.sleep(0.3)
    after = snapshot()
    assert after["children"] - before["children"] == set(), "processes left behind"
    assert after["fds"] <= before["fds"], "file descriptors left open"
    assert after["tmp"] - before["tmp"] == set(), "temp dirs left behind"
    assert host_processes_with("sleep 417") == []
    if backend == "bwrap" and box.cgroup_roots:
        assert not [p for root in box.cgroup_roots for p in root.glob(f"{box.tag}*")], "cgroups left behind"
    if backend == "docker":
        from flywheel.environments.sandbox.docker_backend import LABEL

        for host in box.hosts.hosts:  # every engine the pool used
            assert host.client.containers.list(all=True, filters={"label": f"{LABEL}={box.tag}"}) == []
