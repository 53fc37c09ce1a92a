"""The transformers fallback engine: samples with logprobs that match a forward pass."""

import pytest
import torch

from flywheel.config import EngineConfig
from flywheel.policy.engines import SamplingSpec
from flywheel.policy.engines.hf_engine import HFEngine


def test_hf_engine_samples_and_reloads(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    engine = HFEngine(tiny_model, EngineConfig(backend="hf"))
    prompt = [1, 100, 200]
    groups = engine.generate([prompt, prompt[:2]], SamplingSpec(n=2, max_tokens=5, seed=0))
    assert [len(g) for g in groups] == [2, 2]
    sample = groups[0][0]
    assert 1 <= len(sample.token_ids) <= 5 and len(sample.logprobs) == len(sample.token_ids)
    assert all(lp <= 0 for lp in sample.logprobs)
    again = engine.prompt_logprobs([prompt + sample.token_ids], [len(prompt)])[0]
    assert again == pytest.approx(sample.logprobs, abs=1e-5)
    # new weights: every parameter scaled, so the logprobs must change
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    model.save_pretrained(tmp_path / "scaled")
    engine.load_weights(str(tmp_path / "scaled"))
    changed = engine.prompt_logprobs([prompt + sample.token_ids], [len(prompt)])[0]
    assert max(abs(a - b) for a, b in zip(changed, sample.logprobs)) > 1e-3


def test_hf_engine_samples_from_the_whole_distribution(tiny_model):
    """At temperature 1 and top_p 1 the engine samples the policy itself, the distribution
    its logprobs describe: generate's default top_k=50 would never pick a token ranked below
    50, and a random tiny model is near-uniform over its vocabulary, so nearly every pick is."""
    from transformers import AutoModelForCausalLM

    engine = HFEngine(tiny_model, EngineConfig(backend="hf"))
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    prompt = [1, 100, 200]
    (samples,) = engine.generate([prompt], SamplingSpec(n=4, max_tokens=8, temperature=1.0, seed=0))
    ranks = []
    for sample in samples:
        ids = torch.tensor([prompt + sample.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
        for row, token in zip(logits, sample.token_ids):
            ranks.append(int((row > row[token]).sum()))
    assert max(ranks) >= 50, ranks
