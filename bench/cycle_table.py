"""The cycle, stage by stage, for runs that are done: where the time goes, each stage's
rate, the update's share of the matmul roofline, and samples learned from per hour.

    .venv/bin/python bench/cycle_table.py --store runs/dtype-vs/lake dtv-fp32 dtv-bf16

Reads each run's `runs/<id>/cycles.jsonl` (stage seconds, the update's tokens and step
time) and the lake's `cycles` view (tokens the model sampled; storage/query.py), and
measures the roofline here: torch's float32 matmul FLOP/s on the trainer's threads, best
of a few 2048^3 products (bench/roofline.py's). Achieved FLOP/s of an update = 6 x
parameters x tokens (forward and backward; bench/roofline.py) over its step seconds.
Samples learned from = the samples in the update's gradient (`update.train_samples`:
groups whose rewards all agree are dropped before it). Mean of each run's cycles; the
first cycle is left out of the rates when there are more (the engine's first requests).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.roofline, run as a script


def parameters(model_dir: str) -> int:
    """Parameters of the model as the trainer counts them (tied embeddings once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--store", required=True, help="the runs' lake")
    ap.add_argument("--runs-dir", default="runs")
    args = ap.parse_args()

    import flywheel

    flywheel.use_offline_defaults()
    from bench.roofline import matmul_flops
    from flywheel.config import FlywheelConfig
    from flywheel.run.model_prep import resolve_model
    from flywheel.storage.lake import Lake
    from flywheel.storage.query import connect

    config = FlywheelConfig()
    params = parameters(resolve_model(config.model.path, config.model.cache_dir))
    roof = matmul_flops(2048, 2048, 2048)
    print(f"roofline: {roof / 1e9:.1f} GFLOP/s (float32 matmul); model: {params / 1e6:.1f} M parameters\n")
    lake = Lake(args.store)
    head = ("| run | cycles | generate s (sampled tok/s) | score s | update s (step s: GFLOP/s, share of roofline)"
            " | rest s | cycle s | samples learned from / h | trajectories / h |")  # fmt: skip
    print(head + "\n" + "|---" * 9 + "|")
    for run in args.runs:
        records = [
            json.loads(x) for x in (Path(args.runs_dir) / run / "cycles.jsonl").read_text().splitlines()
        ]
        tokens = dict(connect(lake, run).execute("SELECT cycle, sampled_tokens FROM cycles").fetchall())
        rows = records[1:] if len(records) > 1 else records
        stage = {
            k: mean(r["stage_s"].get(k, 0.0) for r in rows) for k in ("generate", "score", "update", "cycle")
        }
        rest = stage["cycle"] - stage["generate"] - stage["score"] - stage["update"]
        gen_rate = sum(tokens.get(r["cycle"], 0) for r in rows) / sum(r["stage_s"]["generate"] for r in rows)
        updates = [r["update"] for r in rows if r.get("update", {}).get("step_s")]
        step_s = mean(u["step_s"] for u in updates) if updates else float("nan")
        achieved = sum(6 * params * u["tokens"] for u in updates) / sum(u["step_s"] for u in updates)
        hours = sum(r["stage_s"]["cycle"] for r in rows) / 3600
        learned = sum(r.get("update", {}).get("train_samples", 0) for r in rows) / hours
        made = sum(r["trajectories"] for r in rows) / hours
        print(f"| {run} | {len(records)} ({len(rows)} in the means) | {stage['generate']:.1f} ({gen_rate:.0f}) "
              f"| {stage['score']:.1f} | {stage['update']:.1f} ({step_s:.1f}: {achieved / 1e9:.0f}, "
              f"{achieved / roof:.0%}) | {rest:.1f} | {stage['cycle']:.1f} | {learned:.0f} | {made:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
