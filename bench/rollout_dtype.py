"""Rollouts in bfloat16 against float32 on the engine, and how far apart their logprobs are.

    .venv/bin/python bench/rollout_dtype.py [MODEL_DIR] [--tasks 8] [--n 8] [--max-tokens 256] [--rounds 2]

The default cycle's batch (8 code tasks x n=8 x <= 256 tokens) sampled by the flywheel's
engine (policy/engines/vllm_engine.py) at `engine.dtype` float32 and bfloat16, each in a
child process of its own (one engine per process), alternated round by round; best of
`rounds` tokens/s each, engine start-up not counted.

Then the mismatch the trainer corrects for (`trainer.correct_engine_mismatch`): the float32
engine scores the bfloat16 engine's samples (the prompt logprobs of the same tokens; float32
vLLM agrees with the float32 trainer to ~1e-5, tests/test_cycle.py's sync check), and the
script prints the mean |difference| per sampled token and the share of tokens whose ratio
exp(lp_fp32 - lp_bf16) falls outside GRPO's clip range [0.8, 1.28]: tokens an uncorrected
update would treat as already moved and drop from the gradient.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.generate_vs_vllm, run as a script


def child(args) -> None:
    from transformers import AutoTokenizer

    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from bench.generate_vs_vllm import code_tasks
    from flywheel.config import FlywheelConfig
    from flywheel.run.model_prep import resolve_model
    from flywheel.policy.chat import encode_chat
    from flywheel.policy.engines.base import SamplingSpec
    from flywheel.policy.engines.vllm_engine import VLLMEngine

    config = FlywheelConfig(engine={"dtype": args.child})
    model = resolve_model(args.model or config.model.path, config.model.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [encode_chat(tokenizer, t.prompt) for t in code_tasks(args.tasks)]
    engine = VLLMEngine(model, config.engine, config.seed)
    engine.generate(prompts[:1], SamplingSpec(n=1, max_tokens=8))  # warm-up
    t0 = time.perf_counter()
    out = engine.generate(prompts, SamplingSpec(n=args.n, max_tokens=args.max_tokens))
    seconds = time.perf_counter() - t0
    tokens = sum(len(s.token_ids) for group in out for s in group)
    result = {"tokens": tokens, "seconds": seconds}
    if args.samples_out:
        samples = [
            [p, s.token_ids, s.logprobs] for p, group in zip(prompts, out) for s in group if s.token_ids
        ]
        Path(args.samples_out).write_text(json.dumps(samples))
    if args.score:
        samples = json.loads(Path(args.score).read_text())
        scored = engine.prompt_logprobs([p + ids for p, ids, _ in samples], [len(p) for p, _, _ in samples])
        diffs = [a - b for (_, _, lps), mine in zip(samples, scored) for a, b in zip(mine, lps)]
        result["mismatch"] = {
            "tokens": len(diffs),
            "mean_abs": sum(abs(d) for d in diffs) / len(diffs),
            "outside_clip": sum(1 for d in diffs if not 0.8 <= math.exp(d) <= 1.28) / len(diffs),
            "max_abs": max(abs(d) for d in diffs),
        }
    print("RESULT " + json.dumps(result), flush=True)


def run_child(argv: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, timeout=1200, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"child {argv} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    from bench.generate_vs_vllm import batch_arguments

    ap = batch_arguments()
    ap.add_argument("--child", choices=["float32", "bfloat16"], help=argparse.SUPPRESS)
    ap.add_argument("--samples-out", help=argparse.SUPPRESS)
    ap.add_argument("--score", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    common = [*([args.model] if args.model else []), "--tasks", str(args.tasks), "--n", str(args.n),
              "--max-tokens", str(args.max_tokens)]  # fmt: skip
    rates: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    with tempfile.TemporaryDirectory() as tmp:
        bf16_samples = str(Path(tmp) / "bf16.json")
        mismatch = None
        for r in range(args.rounds):
            bf16 = run_child([*common, "--child", "bfloat16", "--samples-out", bf16_samples])
            fp32 = run_child([*common, "--child", "float32", *(["--score", bf16_samples] if r == 0 else [])])
            mismatch = mismatch or fp32.get("mismatch")
            for name, res in (("bfloat16", bf16), ("float32", fp32)):
                rates[name].append(res["tokens"] / res["seconds"])
                print(f"round {r + 1}: {name:8s} {res['tokens']:6d} tokens in {res['seconds']:6.1f} s = "
                      f"{rates[name][-1]:6.1f} tok/s", flush=True)  # fmt: skip
    best = {name: max(v) for name, v in rates.items()}
    print(f"best of {args.rounds}: float32 {best['float32']:.1f} tok/s, bfloat16 {best['bfloat16']:.1f} tok/s, "
          f"ratio bf16 / fp32 {best['bfloat16'] / best['float32']:.2f}x")  # fmt: skip
    m = mismatch
    print(f"bf16 samples scored by the fp32 engine: {m['tokens']} tokens, mean |lp_fp32 - lp_bf16| "
          f"{m['mean_abs']:.4f} nats (max {m['max_abs']:.3f}); {100 * m['outside_clip']:.2f}% of tokens have "
          f"a ratio outside the clip range [0.8, 1.28]")  # fmt: skip


if __name__ == "__main__":
    main()
