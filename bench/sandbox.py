"""Isolated verifications per second: the bwrap pool, the docker pool, and a fresh
`subprocess.run` of python per verification (no isolation at all: the floor any
sandbox that starts a process per verification pays), at concurrency 1, 2, 4 and 8,
in one run, with the ratios to that baseline.

A verification is what tasks/score.py runs for the code domain: the code environment's
harness (hidden tests on stdin, canonical JSON compare, nonce) against a correct
candidate solution, for tasks drawn from the level-1..3 families. Each result is
checked to pass: a fast wrong answer counts for nothing. After the pools close, the
script counts what was left behind (processes, file descriptors, temp dirs).

    .venv/bin/python bench/sandbox.py [--n 2500] [--baseline-n 200] [--backends bwrap,docker]

The docker pool needs a reachable engine (DOCKER_HOST) and the image
(`flywheel sandbox build-image`); without them its rows are skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from environments import get_environment  # noqa: E402
from environments.sandbox import Job, Limits  # noqa: E402

LEVELS = (1, 2, 3)


def jobs(n: int) -> tuple[list[Job], list]:
    env = get_environment("code")
    tasks = [t for lvl in LEVELS for t in env.make_tasks("train", lvl, seed=11, count=20)]
    out, specs = [], []
    for i in range(n):
        task = tasks[i % len(tasks)]
        v = json.loads(task.verifier_json)
        table = {json.dumps(args): res for args, res in v["tests"]}
        solution = (f"```python\nimport json\nTABLE = {json.dumps(table)!r}\n"
                    f"def {v['entry']}(*args):\n    return json.loads(TABLE)[json.dumps(list(args))]\n```")
        out.append(env.verification_job(task, solution))
        specs.append(task)
    return out, specs


def baseline_run(job: Job):
    """A fresh interpreter per verification, files in a temp dir, no isolation."""
    from environments.sandbox import ExecResult

    with tempfile.TemporaryDirectory(prefix="flywheel-bench-") as d:
        for name, content in job.files.items():
            Path(d, name).write_text(content)
        argv = ["/usr/bin/python3" if a == "python" else a for a in job.argv]
        p = subprocess.run(argv, input=job.stdin, capture_output=True, text=True, cwd=d, timeout=30)
        return ExecResult(p.returncode, p.stdout, p.stderr, 0.0)


def measure(run_many, js, specs) -> float:
    env = get_environment("code")
    t0 = time.monotonic()
    results = run_many(js)
    rate = len(js) / (time.monotonic() - t0)
    failed = [r for r, j, t in zip(results, js, specs) if env.score(t, j, r).verdict != "pass"]
    if failed:
        raise SystemExit(f"{len(failed)} verifications did not pass, e.g. {failed[0]}")
    return rate


def leftovers(before_fds: int) -> str:
    kids = [k for t in os.listdir("/proc/self/task") for k in open(f"/proc/self/task/{t}/children").read().split()]
    fds = len(os.listdir("/proc/self/fd")) - before_fds
    tmp = [e for e in os.listdir(tempfile.gettempdir()) if e.startswith("flywheel")]
    return f"leftovers: {len(kids)} child processes, {fds} extra fds, {len(tmp)} temp dirs"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2500, help="verifications per pool and concurrency")
    ap.add_argument("--baseline-n", type=int, default=200)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--backends", default="bwrap,docker")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    fds0 = len(os.listdir("/proc/self/fd"))
    rows: dict[str, dict[int, float]] = {"baseline: subprocess.run per verification": {}}
    base_jobs, base_specs = jobs(args.baseline_n)
    for c in levels:
        with ThreadPoolExecutor(c) as ex:
            rows["baseline: subprocess.run per verification"][c] = measure(
                lambda js: list(ex.map(baseline_run, js)), base_jobs, base_specs)
    js, specs = jobs(args.n)
    limits = Limits(wall_s=10)
    for backend in args.backends.split(","):
        name = f"{backend} pool"
        try:
            if backend == "bwrap":
                from environments.sandbox.bwrap import BwrapSandbox as cls
                kw = {}
            else:
                from environments.sandbox.docker_backend import DockerSandbox as cls
                kw = {"recycle_after": 1000}
            for c in levels:
                box = cls(limits, c, **kw)
                try:
                    box.warm()
                    rows.setdefault(name, {})[c] = measure(box.map, js, specs)
                    assert box.idle_leftovers() == []
                finally:
                    box.close()
        except RuntimeError as exc:
            print(f"{name}: skipped ({exc})")
    time.sleep(0.5)
    base = rows["baseline: subprocess.run per verification"]
    print(f"\nverifications/s ({args.n} per pool and concurrency, {args.baseline_n} for the baseline), "
          f"{os.cpu_count()} cores")
    print("| | " + " | ".join(f"c={c}" for c in levels) + " |")
    print("| --- |" + " --- |" * len(levels))
    for name, by_c in rows.items():
        cells = [f"{by_c[c]:.0f}" + ("" if name.startswith("baseline") else f" ({by_c[c] / base[c]:.1f}x)")
                 for c in levels]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(leftovers(fds0))


if __name__ == "__main__":
    main()
