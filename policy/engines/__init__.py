"""Engine backends, chosen by `engine.backend`. One file per backend."""

from __future__ import annotations

import importlib
import importlib.util

from flywheel.policy.engines.base import Engine, Sample, SamplingSpec

BACKENDS = {
    "vllm": "flywheel.policy.engines.vllm_engine:VLLMEngine",
    "hf": "flywheel.policy.engines.hf_engine:HFEngine",
    "openai": "flywheel.policy.engines.openai_server:OpenAIServerEngine",
}


def make_engine(model_dir: str, cfg, seed: int = 0) -> Engine:
    backend = cfg.backend
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        backend = "hf"  # the documented fallback: vLLM is an optional extra
    module, cls = BACKENDS[backend].split(":")
    return getattr(importlib.import_module(module), cls)(model_dir, cfg, seed)


__all__ = ["Engine", "Sample", "SamplingSpec", "make_engine", "BACKENDS"]
