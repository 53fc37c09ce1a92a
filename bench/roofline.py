"""The update step against the machine's matmul roofline, one script.

    .venv/bin/python bench/roofline.py [MODEL_DIR] [--samples 16] [--steps 2]

1. The roofline: torch's sustained float32 matmul FLOP/s on this machine with the
   trainer's thread count, best of a few repeats, for a large square product and for the
   model's own MLP shape at one micro-batch of tokens.
2. The trainer (DeepSpeed ZeRO-3, policy/trainer.py) on a synthetic batch shaped like a
   default cycle's (bench/update.py's): an RL step (GRPO) and an SFT step, best of
   `steps`. Achieved FLOP/s = 6 x parameters x real tokens (forward and backward) plus
   2 x parameters x tokens per extra forward (the reference model when trainer.kl_coef >
   0); attention's own FLOPs are left out (under 5% at these lengths).
Prints each step's time, achieved FLOP/s and its ratio to the roofline.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.update, run as a script


def matmul_flops(m: int, k: int, n: int, repeats: int = 5) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * m * k * n / best


def main() -> None:
    import flywheel  # noqa: F401  (offline defaults)
    from bench.update import batch_arguments, make_batch
    from flywheel.config import TrainerConfig
    from flywheel.model_prep import resolve_model
    from policy.trainer import GRPOTrainer

    ap = batch_arguments(steps=2)
    args = ap.parse_args()

    model = resolve_model(args.model)
    cfg = TrainerConfig(learning_rate=1e-6)
    trainer = GRPOTrainer(model, cfg)
    hf = trainer.engine.module.config
    params = sum(
        p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in trainer.engine.module.parameters()
    )
    batch = make_batch(hf.vocab_size, args.samples, args.prompt, args.completion)
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in batch)

    threads = torch.get_num_threads()
    square = matmul_flops(2048, 2048, 2048)
    mlp = matmul_flops(cfg.micro_batch_tokens, hf.hidden_size, hf.intermediate_size)
    roof = max(square, mlp)
    print(f"roofline ({threads} threads, float32): 2048^3 {square / 1e9:.1f} GFLOP/s, "
          f"MLP [{cfg.micro_batch_tokens}x{hf.hidden_size}]x[{hf.hidden_size}x{hf.intermediate_size}] "
          f"{mlp / 1e9:.1f} GFLOP/s")  # fmt: skip
    print(f"model: {params / 1e6:.1f} M parameters; batch: {len(batch)} sequences, {tokens} tokens")
    extra_forwards = 1 if cfg.kl_coef > 0 else 0
    flops = (6 + 2 * extra_forwards) * params * tokens
    print(
        "| step | seconds (best of %d) | achieved GFLOP/s | share of the roofline |\n|---|---|---|---|"
        % args.steps
    )
    for objective in ("grpo", "sft"):
        best = float("inf")
        for _ in range(args.steps):
            t0 = time.perf_counter()
            trainer.step(batch, objective=objective)
            best = min(best, time.perf_counter() - t0)
        print(f"| {'RL (GRPO)' if objective == 'grpo' else 'SFT'} | {best:.2f} | {flops / best / 1e9:.1f} "
              f"| {flops / best / roof:.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
