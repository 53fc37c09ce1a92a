"""The update step against the machine's matmul roofline, in float32 and bf16, one script.

    .venv/bin/python bench/roofline.py [MODEL_DIR] [--samples 16] [--steps 2] [--dtypes float32 bfloat16]
                                       [--micro-batch-tokens N] [--lora R] [--plain]

1. The roofline per dtype: torch's sustained matmul FLOP/s on this machine with the
   trainer's thread count, best of a few repeats, for a large square product and for the
   model's own MLP shape at one micro-batch of tokens.
2. The trainer (DeepSpeed ZeRO-3, policy/trainer.py) on a synthetic batch shaped like a
   default cycle's (bench/update.py's), once per dtype (`trainer.bf16` off, then on: bf16
   autocast over float32 master weights): an RL step (GRPO) and an SFT step, best of
   `steps`. Achieved FLOP/s = 6 x parameters x real tokens (forward and backward) plus
   2 x parameters x tokens per extra forward (the reference model when trainer.kl_coef >
   0); attention's own FLOPs are left out (under 5% at these lengths).
Prints each step's time, achieved FLOP/s, its share of its own dtype's roofline and of
the float32 one, and each bf16 / float32 ratio (matmul, RL step, SFT step).
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.update, run as a script


def matmul_flops(m: int, k: int, n: int, repeats: int = 5, dtype=torch.float32) -> float:
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * m * k * n / best


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def step_times(model: str, bf16: bool, batch_args) -> tuple[dict, dict, dict]:
    """(best seconds per objective, the model's shape, the batch's) for one trainer precision."""
    from bench.update import make_batch
    from flywheel.config import TrainerConfig
    from flywheel.config.training import LoraConfig
    from flywheel.policy.trainer import GRPOTrainer

    budget = {"micro_batch_tokens": batch_args.micro_batch_tokens} if batch_args.micro_batch_tokens else {}
    lora = LoraConfig(r=batch_args.lora, alpha=2 * batch_args.lora) if batch_args.lora else None
    cfg = TrainerConfig(learning_rate=1e-6, bf16=bf16, lora=lora, **budget)
    if batch_args.plain:
        from flywheel.policy.plain_trainer import PlainTrainer

        trainer = PlainTrainer(model, cfg)
    else:
        trainer = GRPOTrainer(model, cfg)
    hf = trainer.engine.module.config
    params = sum(
        p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in trainer.engine.module.parameters()
    )
    batch = make_batch(hf.vocab_size, batch_args.samples, batch_args.prompt, batch_args.completion)
    best = {}
    for objective in ("grpo", "sft"):
        best[objective] = float("inf")
        for _ in range(batch_args.steps):
            t0 = time.perf_counter()
            trainer.step(batch, objective=objective)
            best[objective] = min(best[objective], time.perf_counter() - t0)
    shape = {"params": params, "hidden": hf.hidden_size, "inter": hf.intermediate_size,
             "extra_forwards": 1 if cfg.kl_coef > 0 else 0, "micro": cfg.micro_batch_tokens}  # fmt: skip
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
    del trainer  # one trainer in memory at a time (a run without this collect peaked at 13.7 GB RSS)
    gc.collect()
    return best, shape, {"sequences": len(batch), "tokens": tokens}


def main() -> None:
    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from bench.update import batch_arguments
    from flywheel.run.model_prep import resolve_model

    ap = batch_arguments(steps=2)
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    ap.add_argument("--lora", type=int, default=0, help="LoRA of this rank (FLOP/s still counts every parameter)")
    ap.add_argument("--plain", action="store_true", help="the plain-torch trainer (policy/plain_trainer.py), no ZeRO")
    args = ap.parse_args()
    model = resolve_model(args.model)
    threads = torch.get_num_threads()
    t_start = time.perf_counter()
    steps, roofs = {}, {}
    for name in args.dtypes:
        steps[name], shape, batch = step_times(model, name == "bfloat16", args)
        square = matmul_flops(2048, 2048, 2048, dtype=DTYPES[name])
        mlp = matmul_flops(shape["micro"], shape["hidden"], shape["inter"], dtype=DTYPES[name])
        roofs[name] = max(square, mlp)
        print(f"roofline ({threads} threads, {name}): 2048^3 {square / 1e9:.1f} GFLOP/s, "
              f"MLP [{shape['micro']}x{shape['hidden']}]x[{shape['hidden']}x{shape['inter']}] "
              f"{mlp / 1e9:.1f} GFLOP/s")  # fmt: skip
    print(f"model: {shape['params'] / 1e6:.1f} M parameters; batch: {batch['sequences']} sequences, "
          f"{batch['tokens']} tokens")  # fmt: skip
    flops = (6 + 2 * shape["extra_forwards"]) * shape["params"] * batch["tokens"]
    base = roofs.get("float32", next(iter(roofs.values())))
    print(f"| step | trainer dtype | seconds (best of {args.steps}) | achieved GFLOP/s | share of its dtype's "
          "roofline | share of the float32 roofline |\n|---|---|---|---|---|---|")  # fmt: skip
    for objective, label in (("grpo", "RL (GRPO)"), ("sft", "SFT")):
        for name in args.dtypes:
            best = steps[name][objective]
            achieved = flops / best
            print(f"| {label} | {name} | {best:.2f} | {achieved / 1e9:.1f} | {achieved / roofs[name]:.1%} "
                  f"| {achieved / base:.1%} |")  # fmt: skip
    if {"float32", "bfloat16"} <= set(args.dtypes):
        ratio = {o: steps["float32"][o] / steps["bfloat16"][o] for o in ("grpo", "sft")}
        print(f"bf16 / float32: matmul roofline {roofs['bfloat16'] / roofs['float32']:.2f}x, "
              f"RL step {ratio['grpo']:.2f}x, SFT step {ratio['sft']:.2f}x (achieved FLOP/s)")  # fmt: skip
    print(f"wall: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
