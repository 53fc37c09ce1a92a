"""Isolated verifications per second: the bwrap pool, the docker pool, and a fresh
`subprocess.run` of python per verification (no isolation at all: the floor any
sandbox that starts a process per verification pays), at concurrency 1, 2, 4 and 8,
in one run, with the ratios to that baseline: per level, and best against best (the
headline: a level where the baseline had a bad moment flatters the pool).

A verification is what tasks/score.py runs for the code domain: the code environment's
harness (hidden inputs on stdin, outputs back as canonical JSON on a nonce line,
compared on the host by the environment's `score`) against a correct
candidate solution, for tasks drawn from the level-1..3 families. Each result is
checked to pass: a fast wrong answer counts for nothing. After the pools close, the
script counts what was left behind (processes, file descriptors, temp dirs).

    .venv/bin/python bench/sandbox.py [--n 2500] [--baseline-n 200] [--rounds 2] [--backends bwrap,docker]

With the defaults each pool runs 2 rounds x 4 levels x 2,500 = 20,000 verifications.

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

from flywheel.environments import get_environment  # noqa: E402
from flywheel.environments.sandbox import Job, Limits  # noqa: E402
from flywheel.config import SandboxConfig  # noqa: E402

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
        out.append(env.job(task, solution))
        specs.append(task)
    return out, specs


def baseline_run(job: Job):
    """A fresh interpreter per verification, files in a temp dir, no isolation."""
    from flywheel.environments.sandbox import ExecResult

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


def temp_dirs() -> set[str]:
    return {e for e in os.listdir(tempfile.gettempdir()) if e.startswith("flywheel")}


def leftovers(before_fds: int, before_tmp: set[str]) -> str:
    kids = [k for t in os.listdir("/proc/self/task") for k in open(f"/proc/self/task/{t}/children").read().split()]
    fds = len(os.listdir("/proc/self/fd")) - before_fds
    tmp = temp_dirs() - before_tmp  # not what was there before (another run's, a private dockerd's)
    return f"leftovers: {len(kids)} child processes, {fds} extra fds, {len(tmp)} temp dirs"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2500, help="verifications per pool and concurrency")
    ap.add_argument("--baseline-n", type=int, default=200)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--rounds", type=int, default=2, help="best of this many rounds")
    ap.add_argument("--recycle-after", type=int, default=SandboxConfig().recycle_after,
                    help="both pools replace a worker after this many executions (default: the config's)")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    fds0, tmp0 = len(os.listdir("/proc/self/fd")), temp_dirs()
    base_name = "baseline: subprocess.run per verification"
    rows: dict[str, dict[int, float]] = {base_name: {}}
    base_jobs, base_specs = jobs(args.baseline_n)
    js, specs = jobs(args.n)
    limits = Limits(wall_s=10)
    pools = {}
    for backend in args.backends.split(","):
        try:
            if backend == "bwrap":
                from flywheel.environments.sandbox.bwrap import BwrapSandbox

                BwrapSandbox(limits, 1).close()  # fails here when bwrap is missing
                pools[f"{backend} pool"] = lambda c: BwrapSandbox(limits, c, recycle_after=args.recycle_after)
            else:
                from flywheel.environments.sandbox.docker_backend import DockerSandbox

                DockerSandbox(limits, 1).close()  # fails here without an engine or the image
                pools[f"{backend} pool"] = lambda c: DockerSandbox(limits, c, recycle_after=args.recycle_after)
        except RuntimeError as exc:
            print(f"{backend} pool: skipped ({exc})")
    # Side by side per concurrency level, best of `rounds`: the machine is shared and
    # noisy, and a load spike then hits the baseline and the pools alike.
    for _ in range(args.rounds):
        for c in levels:
            with ThreadPoolExecutor(c) as ex:
                rate = measure(lambda js: list(ex.map(baseline_run, js)), base_jobs, base_specs)
            rows[base_name][c] = max(rows[base_name].get(c, 0), rate)
            for name, make in pools.items():
                box = make(c)
                try:
                    box.warm()
                    rate = measure(box.map, js, specs)
                    assert box.idle_leftovers() == []
                finally:
                    box.close()
                rows.setdefault(name, {})[c] = max(rows.get(name, {}).get(c, 0), rate)
    time.sleep(0.5)
    base = rows[base_name]
    print(f"\nverifications/s, best of {args.rounds} ({args.n} per pool and concurrency, {args.baseline_n} for "
          f"the baseline), {os.cpu_count()} cores")
    print("| | " + " | ".join(f"c={c}" for c in levels) + " |")
    print("| --- |" + " --- |" * len(levels))
    for name, by_c in rows.items():
        cells = [f"{by_c[c]:.0f}" + ("" if name.startswith("baseline") else f" ({by_c[c] / base[c]:.1f}x)")
                 for c in levels]
        print(f"| {name} | " + " | ".join(cells) + " |")
    # The column ratios pair each level with the baseline's at that level, which flatters a
    # pool wherever the baseline had a bad moment: the headline is best against best.
    best_base = max(base.values())
    for name, by_c in rows.items():
        if not name.startswith("baseline"):
            c = max(by_c, key=by_c.get)
            print(f"{name}: best {by_c[c]:.0f}/s (c={c}) against the baseline's best {best_base:.0f}/s "
                  f"(c={max(base, key=base.get)}): {by_c[c] / best_base:.1f}x")
    print(leftovers(fds0, tmp0))


if __name__ == "__main__":
    main()
