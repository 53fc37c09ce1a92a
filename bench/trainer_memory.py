"""Peak memory and time of one trainer step on one long sample, chunked against whole logits.

    .venv/bin/python bench/trainer_memory.py [MODEL_DIR] [--tokens 16384] [--prompt 512]
        [--dtypes float32 bfloat16] [--variants chunked whole+ckpt whole]

The trainer (policy/trainer.py, DeepSpeed ZeRO-3, one process on CPU; default model: the
run's, flywheel/run/model_prep.py) takes one GRPO step on one synthetic sample of `--tokens`
tokens (a `--prompt`-token prompt, the rest completion: an episode's whole history), each
variant and dtype in a process of its own, one after another (peak memory is per process):

- chunked: the defaults for a sample longer than the budget: logits a chunk at a time
  (trainer.logits_chunk_tokens) and activation checkpointing (policy/chunked.py);
- whole+ckpt: the whole [positions, vocabulary] logits, with activation checkpointing;
- whole: the path before, whole logits and every activation kept.

Each process first takes a short step (256 tokens: the first step allocates the gradients
and AdamW's moments), then the long one; printed: the short step's peak resident memory,
the memory resident before the long step, the long step's peak (its `peak_rss_gib` metric)
and its time. A variant that would not fit the machine is not run here:
pick the variants (start with a shorter `--tokens` and scale), since a process the kernel
kills for memory may take a neighbour with it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

VARIANTS = {
    "chunked": {},
    "whole+ckpt": {"logits_chunk_tokens": None, "gradient_checkpointing": True},
    "whole": {"logits_chunk_tokens": None, "gradient_checkpointing": False},
}


def _rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def child(model: str, tokens: int, prompt: int, dtype: str, variant: str) -> dict:
    from flywheel.config import TrainerConfig
    from flywheel.policy.trainer import GRPOTrainer, TrainSample

    cfg = TrainerConfig(learning_rate=1e-6, bf16=dtype == "bfloat16", **VARIANTS[variant])
    trainer = GRPOTrainer(model, cfg)
    rng = random.Random(0)
    vocab = trainer.engine.module.config.vocab_size
    ids = [rng.randrange(vocab) for _ in range(tokens)]
    # a short step first: the first one allocates the gradients and AdamW's moments
    short = trainer.step([TrainSample(ids[:64], ids[64:256], [-2.0] * 192, 1.0)])
    before = _rss_gib()
    sample = TrainSample(ids[:prompt], ids[prompt:], [-2.0] * (tokens - prompt), 1.0)
    t0 = time.perf_counter()
    metrics = trainer.step([sample])
    return {"short_peak_gib": short["peak_rss_gib"], "before_gib": round(before, 2),
            "step_peak_gib": metrics["peak_rss_gib"], "step_s": round(time.perf_counter() - t0, 1),
            "loss": metrics["loss"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--variants", nargs="+", default=["chunked"], choices=list(VARIANTS))
    ap.add_argument("--child", nargs=2, metavar=("DTYPE", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.model, args.tokens, args.prompt, *args.child)), flush=True)
        return
    from flywheel.run.model_prep import resolve_model

    model = resolve_model(args.model)
    print(f"model {model}; one sample of {args.tokens} tokens ({args.prompt} prompt), one step each")
    head = ("dtype", "variant", "short step peak", "before", "long step peak", "step s")
    print("{:9} {:11} {:>15} {:>7} {:>14} {:>7}".format(*head))
    for dtype in args.dtypes:
        for variant in args.variants:
            shape = ["--tokens", str(args.tokens), "--prompt", str(args.prompt)]
            cmd = [sys.executable, __file__, model, *shape, "--child", dtype, variant]
            out = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                print(f"{dtype:9} {variant:11} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
                continue
            r = json.loads(lines[-1][len("RESULT ") :])
            print(f"{dtype:9} {variant:11} {r['short_peak_gib']:>15.2f} {r['before_gib']:>7.2f} "
                  f"{r['step_peak_gib']:>14.2f} {r['step_s']:>7.1f}")  # GiB, GiB, GiB, s


if __name__ == "__main__":
    main()
