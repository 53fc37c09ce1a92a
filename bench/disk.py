"""Bytes a run keeps under runs/<run>/, after each cycle and at its peak, one script.

    .venv/bin/python bench/disk.py OUT_DIR [--cycles 4] [--model MODEL_DIR] [--set key=value ...]

Runs a short real flywheel (the tiny test model by default: flywheel.run.model_prep's
build_tiny_model, 6.6M parameters; math and code at level 1, 4 tasks x 2 samples, a local
lake) while a thread sums the files under the run dir every second. Prints, per number of
cycles done, the total, the policies' share (exports and DeepSpeed checkpoints), the rest
of the lake (the rows resume and the report read) and the staging dir, the peak seen
(an update holds its new export and checkpoint beside the old ones until it publishes),
and the model dir's size to scale by. Polling misses peaks shorter than a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while we walked (a publish)
                pass
    return total


def parts(run_dir: Path) -> dict[str, int]:
    lake = run_dir / "lake"
    policies = du(lake / "policies")
    return {"total": du(run_dir), "policies": policies, "lake_rows": du(lake) - policies,
            "staging": du(run_dir / "staging")}  # fmt: skip


def main() -> None:
    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from flywheel.flows.flywheel import flywheel as run_flywheel
    from flywheel.config import FlywheelConfig, apply_overrides
    from flywheel.run.model_prep import build_tiny_model

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--model", help="default: the tiny test model, built under OUT")
    ap.add_argument("--run-id", default="disk")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    args = ap.parse_args()
    model = args.model or str(args.out / "tiny")
    if not args.model and not Path(model).exists():
        build_tiny_model(Path(model))
    config = FlywheelConfig(
        run_id=args.run_id, runs_dir=str(args.out / "runs"), cycles=args.cycles, seed=3, model={"path": model},
        sampler={"tasks_per_cycle": 4, "levels": [1], "domains": ["math", "code"]},
        generation={"k": 2, "max_tokens": 24},
        trainer={"drop_zero_variance_groups": False, "learning_rate": 1e-2},  # every cycle updates
        eval={"in_run_tasks_per_level": 1, "suites": []},
    )  # fmt: skip
    config = apply_overrides(config, args.sets)
    run_dir = config.run_dir
    seen: dict[int, dict] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            cycles = run_dir / "cycles.jsonl"
            done = len(cycles.read_text().splitlines()) if cycles.exists() else 0
            if run_dir.exists():
                now = parts(run_dir)
                now["peak"] = max(now["total"], seen.get(done, {}).get("peak", 0))
                seen[done] = now
            time.sleep(1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    t0 = time.monotonic()
    run_flywheel(config)
    stop.set()
    thread.join()
    seen[args.cycles] = {**parts(run_dir), "peak": seen.get(args.cycles, {}).get("peak", 0)}
    print(f"model dir {du(Path(model)):,} bytes; run {time.monotonic() - t0:.0f} s; "
          f"store.keep_policy_exports={config.store.keep_policy_exports}")  # fmt: skip
    print("| cycles done | total | policies | lake rows | staging | peak seen |\n|---|---|---|---|---|---|")
    for done, p in sorted(seen.items()):
        print(
            f"| {done} | {p['total']:,} | {p['policies']:,} | {p['lake_rows']:,} | {p['staging']:,} | {p['peak']:,} |"
        )
    (args.out / f"disk-{args.run_id}.json").write_text(json.dumps(seen, indent=1))


if __name__ == "__main__":
    main()
