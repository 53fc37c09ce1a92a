"""Rollout tokens/s and update MFU of one finished cycle, from its run dir.

    python bench/gpu_report.py runs/<run id> [--peak-tflops 989]

MFU counts 6 x parameters x tokens per update step (forward and backward, no attention
term), against the accelerator's dense peak given on the command line.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args = ap.parse_args()
    from safetensors import safe_open

    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from flywheel.storage.lake import Lake

    run_dir = Path(args.run_dir)
    summary = json.loads((run_dir / "cycles.jsonl").read_text().splitlines()[0])
    table = Lake(str(run_dir / "lake")).trajectories(summary["run_id"], [summary["cycle"]])
    generated = sum(len(ids) for ids in table.column("completion_token_ids").to_pylist())
    from flywheel.storage.policies import PolicyStore

    policy_dir = PolicyStore(Lake(str(run_dir / "lake")), summary["run_id"], run_dir / "policy-cache").hf_dir()
    params = 0
    for f in Path(policy_dir).glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            params += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())
    update = summary["update"]
    tokens = update.get("tokens", 0)  # prompt and completion tokens the step processed
    print(f"rollout: {generated} tokens in {summary['stage_s']['generate']:.1f} s = {generated / summary['stage_s']['generate']:.0f} tok/s")
    if "step_s" in update:
        flops = 6 * params * tokens / update["step_s"]
        print(f"update: {update['step_s']:.2f} s/step, ~{flops / 1e12:.1f} TFLOP/s, MFU {100 * flops / (args.peak_tflops * 1e12):.1f}%")
    else:
        print(f"update: skipped ({update.get('skipped', 'no step')})")


if __name__ == "__main__":
    main()
