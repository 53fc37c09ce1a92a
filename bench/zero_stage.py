"""The update step on one process: DeepSpeed ZeRO-3 against ZeRO stage 0 (`trainer.zero_stage`),
one script, arms alternating (the machine's speed moves within minutes).

    .venv/bin/python bench/zero_stage.py [MODEL_DIR] [--groups 5] [--k 8] [--rounds 2] [--steps 3]

The batch is shaped like a default cycle's update: `--groups` prompts of 100-200 tokens with
`--k` completions of 20-120 tokens each (synthetic ids: a step's cost does not depend on what
the tokens say), so with shared prompts (on by default on CPU) a step is one micro-batch per
group, where per-micro-batch costs weigh most. Arms, each in a process of its own (one
warm-up step, then `--steps` timed ones), in turn for `--rounds` rounds:

- `zero3`: the default, policy/ds_zero3.json;
- `stage0`: `trainer.zero_stage: 0`, which under bf16 also casts the weights once per step;
- `stage0-cast-per-forward`: stage 0 with that one-cast region off, to show each part's share.

Prints each arm's median step, tokens per second of step, and each arm's ratio to `zero3`
per round (a round's arms ran minutes apart). The trainer's dtype is its default here (bf16 on
a CPU with AMX or AVX512-BF16); `--dtype float32` for the other. Not measured: a whole cycle
(see bench/README.md for the cycle this step sits in).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ARMS = ("zero3", "stage0", "stage0-cast-per-forward")


def group_batch(vocab: int, groups: int, k: int) -> list:
    from flywheel.policy.trainer import TrainSample

    rng, batch = random.Random(0), []
    for _ in range(groups):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(100, 200))]
        for i in range(k):
            c = [rng.randrange(vocab) for _ in range(rng.randint(20, 120))]
            batch.append(TrainSample(prompt, c, [-2.0] * len(c), 1.0 if i % 2 else -1.0))
    return batch


def one_arm(args) -> dict:
    """In the child process: the arm's trainer, a warm-up step, then the timed ones."""
    import flywheel

    flywheel.use_offline_defaults()
    from flywheel.config import TrainerConfig
    from flywheel.policy.trainer import GRPOTrainer

    bf16 = None if args.dtype == "default" else args.dtype == "bfloat16"
    cfg = TrainerConfig(learning_rate=1e-6, bf16=bf16, zero_stage=3 if args.arm == "zero3" else 0)
    trainer = GRPOTrainer(args.model, cfg)
    if args.arm == "stage0-cast-per-forward":
        trainer._weights_cast_once = contextlib.nullcontext
    batch = group_batch(trainer.engine.module.config.vocab_size, args.groups, args.k)
    metrics = trainer.step(batch)  # the first allocates gradients and AdamW's moments
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        trainer.step(batch)
        times.append(time.perf_counter() - t0)
    return {"arm": args.arm, "times": times, "tokens": metrics["tokens"], "micro_batches": metrics["micro_batches"],
            "bf16": trainer.bf16}  # fmt: skip


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dtype", choices=["default", "float32", "bfloat16"], default="default")
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # the child's
    args = ap.parse_args()
    if args.arm:
        print("RESULT " + json.dumps(one_arm(args)), flush=True)
        return
    import flywheel

    flywheel.use_offline_defaults()
    from flywheel.run.model_prep import resolve_model

    model, t_start, rounds = resolve_model(args.model), time.perf_counter(), []
    for r in range(args.rounds):
        row = {}
        for arm in ARMS:
            cmd = [sys.executable, __file__, model, "--arm", arm, "--groups", str(args.groups), "--k", str(args.k),
                   "--steps", str(args.steps), "--dtype", args.dtype]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            row[arm] = json.loads(out.split("RESULT ", 1)[1])
            times = ", ".join(f"{t:.2f}" for t in row[arm]["times"])
            print(f"round {r + 1} {arm}: steps {times} s", flush=True)
        rounds.append(row)
    first = rounds[0]["zero3"]
    print(f"batch: {args.groups} groups x {args.k}, {first['tokens']} tokens, {first['micro_batches']} micro-batches "
          f"a step; trainer bf16: {first['bf16']}")  # fmt: skip
    print("| arm | median step, s | tokens / s of step | zero3 / arm, per round |\n|---|---|---|---|")
    for arm in ARMS:
        med = statistics.median(t for row in rounds for t in row[arm]["times"])
        ratios = ", ".join(
            f"{statistics.median(row['zero3']['times']) / statistics.median(row[arm]['times']):.2f}x"
            for row in rounds
        )
        print(f"| {arm} | {med:.2f} | {first['tokens'] / med:.0f} | {ratios} |")
    print(f"wall: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
