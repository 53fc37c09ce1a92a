"""Cycle time of the asynchronous pipeline against the synchronous one, and against its
slowest stage, from one script: the same config run twice (`pipeline.max_policy_lag` 0,
then 1, or the order given), each in its own process (vLLM and DeepSpeed are started
once per process).

    .venv/bin/python bench/async_overlap.py [--cycles 5] [--tasks 4] [--k 8] [--order sync,async]

Steady state only: the first two cycles are skipped (engine and trainer start-up, and
the async pipeline's first cycle has no update to overlap). Per cycle:
- cycle time: the time between two cycles' ends (`finished_at` in cycles.jsonl);
- rollout side: sample + generate + score + archive + replay (stage_s), without waits;
- update: the update task's own wall time (`update_s` in updates.jsonl), plus its sync;
- slowest stage: the larger of the two. In sync mode a cycle is their sum.
Target (issue 9): async cycle time <= 1.15x its slowest stage.

On a CPU machine the engine and the trainer share the same cores, so each side is
slower while they overlap (both are measured in the async run itself); on GPUs they hold
separate devices.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROLLOUT_STAGES = ("sample", "generate", "score", "archive", "replay")


def run(mode: str, lag: int, args, runs_dir: Path) -> Path:
    cmd = [
        sys.executable, "-m", "flywheel.cli", "run", "--run-id", mode, "--cycles", str(args.cycles),
        "--set", f"runs_dir={runs_dir}", "--set", f"pipeline.max_policy_lag={lag}",
        "--set", f"sampler.tasks_per_cycle={args.tasks}", "--set", f"generation.k={args.k}",
        "--set", f"generation.max_tokens={args.max_tokens}", "--set", f"sampler.domains={args.domains}",
        "--set", "trainer.learning_rate=2e-5",
    ]  # fmt: skip
    if args.model:
        cmd += ["--model", args.model]
    print(f"[{mode}] {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return runs_dir / mode


def steady_state(run_dir: Path, skip: int, lag: int) -> dict:
    cycles = [json.loads(x) for x in (run_dir / "cycles.jsonl").read_text().splitlines()]
    updates = {u["cycle"]: u for u in map(json.loads, (run_dir / "updates.jsonl").read_text().splitlines())}
    ends = [datetime.fromisoformat(c["finished_at"]).timestamp() for c in cycles]
    rows = []
    for i in range(skip, len(cycles)):
        c = cycles[i]
        rollout = sum(c["stage_s"].get(s, 0.0) for s in ROLLOUT_STAGES)
        # the update beside cycle c: in sync mode c's own, in async mode the one of c - lag
        u = updates.get(c["cycle"] - lag, {})
        update = u.get("update_s", 0.0) + u.get("sync_s", 0.0)
        rows.append({"cycle": ends[i] - ends[i - 1], "rollout": rollout, "update": update})
    mean = lambda key: statistics.mean(r[key] for r in rows)  # noqa: E731
    out = {key: mean(key) for key in ("cycle", "rollout", "update")}
    out["slowest"] = statistics.mean(max(r["rollout"], r["update"]) for r in rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="an HF model dir (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--domains", default="[code,math,extraction,data]")
    ap.add_argument("--order", default="sync,async")
    ap.add_argument("--skip", type=int, default=2, help="warm-up cycles left out")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        for mode in args.order.split(","):
            lag = {"sync": 0, "async": 1}[mode]
            results[mode] = steady_state(run(mode, lag, args, Path(tmp)), args.skip, lag)
            print(f"[{mode}] " + json.dumps({k: round(v, 1) for k, v in results[mode].items()}), flush=True)
    s, a = results["sync"], results["async"]
    print(f"\nsteady state over cycles {args.skip}..{args.cycles - 1} (seconds per cycle)")
    print("| mode | cycle | rollout side | update + sync | slowest stage | cycle / slowest |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode, r in results.items():
        print(f"| {mode} | {r['cycle']:.1f} | {r['rollout']:.1f} | {r['update']:.1f} | {r['slowest']:.1f} | "
              f"{r['cycle'] / r['slowest']:.2f}x |")  # fmt: skip
    print(f"\nasync against sync: {s['cycle'] / a['cycle']:.2f}x faster per cycle; "
          f"async cycle / its slowest stage: {a['cycle'] / a['slowest']:.2f}x (target <= 1.15x)")


if __name__ == "__main__":
    main()
