"""The generate stage against vLLM's own best: the same prompts, batch, n and lengths, on
the same `LLM` object, one script.

    .venv/bin/python bench/generate_vs_vllm.py [MODEL_DIR] [--tasks 8] [--n 8] [--max-tokens 256] [--rounds 2] [--dtype float32]

Three ways of sampling the default cycle's batch (8 code tasks x n=8 x <= 256 tokens, the
engine's defaults: float32 unless --dtype, 1 GiB KV cache), alternated round by round, best of `rounds`:
- **vLLM plain**: `LLM.generate` on the prompts' token ids, nothing else (no logprobs);
- **vLLM + logprobs**: the same with `logprobs=0`, which the trainer needs (the sampled
  token's logprob); this is the stage's real ceiling;
- **generate stage**: `flywheel.tasks.generate.rollouts` (chat encoding, the engine wrapper,
  Rollout records), the code a cycle runs.
Prints tokens/s for each, the stage's ratio to both, and where the rest goes: prompt
encoding, the engine call, and record building, timed inside the stage's own round.
"""

from __future__ import annotations

import argparse
import time

import flywheel  # noqa: E402

flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them


class Parts:
    """What the generate stage's body reads (tasks/context.py), built here without a run."""

    def __init__(self, engine, tokenizer, domains):
        self.engine, self.tokenizer, self.domains = engine, tokenizer, domains
        self.sandbox, self.reward_functions, self.judge = None, [], None


def batch_arguments() -> argparse.ArgumentParser:
    """The model and the default cycle's batch, shared with bench/rollout_dtype.py."""
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    return ap


def code_tasks(count: int) -> list:
    """`count` train tasks of the code domain, its levels in turn."""
    from flywheel.environments import get_environment

    env = get_environment("code")
    return [t for level in env.levels for t in env.make_tasks("train", level, 0, count)][:count]


def main() -> None:
    ap = batch_arguments()
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the engine's")
    args = ap.parse_args()

    from transformers import AutoTokenizer
    from vllm import SamplingParams, TokensPrompt

    from flywheel.environments.registry import Domains
    from flywheel.config import FlywheelConfig
    from flywheel.run.model_prep import resolve_model
    from flywheel.policy.chat import encode_chat
    from flywheel.policy.engines.vllm_engine import VLLMEngine
    from flywheel.tasks import generate as stage
    from flywheel.tasks.context import StageContext

    config = FlywheelConfig(
        run_id="bench", generation={"k": args.n, "max_tokens": args.max_tokens}, engine={"dtype": args.dtype}
    )
    model = resolve_model(args.model or config.model.path, config.model.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    tasks = code_tasks(args.tasks)
    engine = VLLMEngine(model, config.engine, config.seed)
    ctx = StageContext(config=config, run_id="bench", cycle=0, label="train", policy_version=0, policy_lag=0,
                       generation=config.generation)  # fmt: skip
    parts = Parts(engine, tokenizer, Domains(["code"]))
    prompts = [encode_chat(tokenizer, t.prompt) for t in tasks]
    engine.generate(prompts[:1], stage.sampling_spec(ctx).__class__(n=1, max_tokens=8))  # warm-up

    def plain(logprobs):
        params = SamplingParams(n=args.n, temperature=1.0, max_tokens=args.max_tokens, logprobs=logprobs)
        t0 = time.perf_counter()
        out = engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return sum(len(c.token_ids) for o in out for c in o.outputs), time.perf_counter() - t0

    split = {}

    def staged():
        t0 = time.perf_counter()
        [encode_chat(tokenizer, t.prompt) for t in tasks]  # what the stage's own encoding costs
        split["encode"] = time.perf_counter() - t0
        calls = []
        real = engine.generate

        def timed(*a, **k):
            t = time.perf_counter()
            result = real(*a, **k)
            calls.append(time.perf_counter() - t)
            return result

        engine.generate = timed
        t0 = time.perf_counter()
        try:
            rollouts = stage.rollouts(parts, ctx, tasks)
        finally:
            engine.generate = real
        elapsed = time.perf_counter() - t0
        split["engine"] = sum(calls)
        return sum(len(r.completion_token_ids) for r in rollouts), elapsed

    ways = {"vLLM plain": lambda: plain(None), "vLLM + logprobs": lambda: plain(0), "generate stage": staged}
    best: dict[str, tuple[float, int, float]] = {}
    splits = {}
    for r in range(args.rounds):
        for name, fn in ways.items():
            tokens, elapsed = fn()
            print(
                f"round {r + 1} {name}: {tokens} tokens in {elapsed:.1f} s ({tokens / elapsed:.1f} tok/s)",
                flush=True,
            )
            if name not in best or tokens / elapsed > best[name][0]:
                best[name] = (tokens / elapsed, tokens, elapsed)
                if name == "generate stage":
                    splits = {**split, "total": elapsed}
    engine.close()
    print(f"\n{args.tasks} tasks x n={args.n} x <= {args.max_tokens} tokens, best of {args.rounds} rounds")
    print("| way | tok/s | tokens | seconds |\n|---|---|---|---|")
    for name, (rate, tokens, elapsed) in best.items():
        print(f"| {name} | {rate:.1f} | {tokens} | {elapsed:.1f} |")
    stage_rate = best["generate stage"][0]
    print(f"stage / vLLM plain: {stage_rate / best['vLLM plain'][0]:.2f}x; "
          f"stage / vLLM + logprobs: {stage_rate / best['vLLM + logprobs'][0]:.2f}x")  # fmt: skip
    outside = splits["total"] - splits["engine"]
    print(f"inside the stage's best round: engine calls {splits['engine']:.2f} s, everything else {outside:.3f} s "
          f"(prompt encoding alone, timed apart: {splits['encode']:.3f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
