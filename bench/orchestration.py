"""What Prefect costs per cycle: task calls and artifacts against plain function calls.

A cycle makes 6 task calls (one per stage), ~10 progress-artifact updates and 4 artifacts.
This script times each kind of call inside a real (ephemeral) Prefect flow run, side by
side with the same work done without Prefect, and prints the overhead per cycle as a
share of a cycle's stage time (read from a run's cycles.jsonl, or given in seconds).
It also times the ephemeral server's start-up (the first flow call in this process).

    .venv/bin/python bench/orchestration.py [runs/<run id>/cycles.jsonl | SECONDS]
"""

from __future__ import annotations

import json
import sys
import time

import flywheel

flywheel.use_offline_defaults()  # no hub, no telemetry; children inherit them
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from flywheel.environments import get_environment

N = 40


@task(cache_policy=NO_CACHE)
def stage(runtime, payload):
    return len(payload)


@flow
def measure(payload) -> dict:
    runtime = object()
    t0 = time.perf_counter()
    for _ in range(N):
        stage.fn(runtime, payload)
    plain = (time.perf_counter() - t0) / N
    t0 = time.perf_counter()
    for _ in range(N):
        stage(runtime, payload)
    as_task = (time.perf_counter() - t0) / N
    t0 = time.perf_counter()
    artifact = create_progress_artifact(0.0)
    for i in range(N):
        update_progress_artifact(artifact, 100.0 * i / N)
    progress = (time.perf_counter() - t0) / (N + 1)
    t0 = time.perf_counter()
    for i in range(N // 4):
        create_markdown_artifact(f"cycle {i}")
    artifact_s = (time.perf_counter() - t0) / (N // 4)
    return {"task_overhead_s": as_task - plain, "progress_update_s": progress, "artifact_s": artifact_s}


def cycle_seconds(arg: str | None) -> float:
    if arg is None:
        return 115.0  # one default cycle on the 2-core machine (see the closing notes)
    try:
        return float(arg)
    except ValueError:
        rows = [json.loads(line) for line in open(arg)]
        return sum(sum(r["stage_s"].values()) for r in rows) / len(rows)


def main() -> None:
    tasks = get_environment("code").make_tasks("train", 1, 0, 8)  # a cycle's worth of tasks
    t0 = time.perf_counter()
    costs = measure(tasks)
    first_call = time.perf_counter() - t0
    per_cycle = 6 * costs["task_overhead_s"] + 10 * costs["progress_update_s"] + 4 * costs["artifact_s"]
    seconds = cycle_seconds(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"ephemeral server start + first flow run: {first_call:.1f} s (once per process)")
    print(f"task call overhead:      {1000 * costs['task_overhead_s']:.1f} ms")
    print(f"progress update:         {1000 * costs['progress_update_s']:.1f} ms")
    print(f"artifact:                {1000 * costs['artifact_s']:.1f} ms")
    print(f"Prefect per cycle:       {per_cycle:.2f} s of a {seconds:.0f} s cycle = {100 * per_cycle / seconds:.2f}%")


if __name__ == "__main__":
    main()
