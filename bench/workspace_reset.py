"""Workspace set-up per episode: the prepared template against running the setup every episode.

    .venv/bin/python bench/workspace_reset.py [--episodes 100] [--concurrency 2]

One warm bwrap pool (workers started before timing). For each task, one "episode" is:
take a workspace ready for the task, then release it (wiped, back to the pool); nothing
else runs in it. Three ways, timed interleaved (A, B, C, A, B, C, ...) so that the
machine's noise falls on all of them alike:

- setup each episode: the set-up path without a template: acquire with the starting files
  (one put), run the task's setup commands with bash, snapshot;
- template (what workspace tasks do, environments/sources/workspace_run.py): acquire empty,
  restore the tree captured after the first setup with one in-process Python run (no import), snapshot;
- reset: the workspace kept across episodes and `reset()` to its snapshot (the floor: a
  rewrite of the files from the worker's memory; it holds a worker per task, which a pool
  of fewer workers than tasks cannot do, so it is shown, not used).

Tasks: the shipped Harbor tasks with setup commands (git repositories made by their
Dockerfile's RUN lines) and one without (files only: the template path is then the plain
acquire, as for every domain). Reported per task: mean, p50 and p95 milliseconds per
episode and the ratio of the mean to the setup-each-episode one.
"""

from __future__ import annotations

import argparse
import statistics
import time

from flywheel.environments.registry import resolve
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox
from flywheel.environments.sources.workspace_run import run_setup

TASKS = ["git-revert-bad-commit", "git-find-breaking-commit", "log-summary-json", "migrate-urls"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    env = resolve("harbor")
    rows = {r.key: r for r in env.all_rows()}
    box = BwrapSandbox(Limits(wall_s=60, cpu_s=60), args.concurrency)
    box.warm()
    limits = Limits(wall_s=120, cpu_s=120, output_bytes=1 << 16)
    print(f"| task | setup commands | files | way | mean ms | p50 ms | p95 ms | x setup each |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    try:
        for key in TASKS:
            row = rows[key]
            task = env.task_of(row)
            env.open_workspace(box, task).release()  # the first set-up captures the template

            def each():
                ws = box.workspace(row.files)
                problem = run_setup(ws, row.setup, limits)
                assert not problem, problem
                ws.snapshot()
                ws.release()

            def template():
                env.open_workspace(box, task).release()

            held = env.open_workspace(box, task)
            ways = {"setup each episode": each, "template": template, "reset (held)": held.reset}
            times: dict[str, list[float]] = {w: [] for w in ways}
            for _ in range(args.episodes):
                for way, fn in ways.items():
                    start = time.perf_counter()
                    fn()
                    times[way].append((time.perf_counter() - start) * 1000)
            held.release()
            base = statistics.mean(times["setup each episode"])
            for way, ms in times.items():
                ms.sort()
                mean = statistics.mean(ms)
                print(f"| {key} | {len(row.setup)} | {len(row.files)} | {way} | {mean:.1f} | {ms[len(ms) // 2]:.1f} "
                      f"| {ms[int(len(ms) * 0.95)]:.1f} | {mean / base:.2f} |")  # fmt: skip
    finally:
        box.close()


if __name__ == "__main__":
    main()
