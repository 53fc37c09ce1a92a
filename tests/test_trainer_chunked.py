"""Long sequences in the trainer (policy/chunked.py) with the tiny model: logprobs made a chunk
of logits at a time give the loss and gradients of the whole logits; the trainer's step is the
same with chunks and activation checkpointing; micro-batches pack to the token budget and
lose no sample; a long sample's step peaks far lower than with its whole logits."""

import os
import random

import pytest
import torch
from pydantic import ValidationError

from flywheel.config import TrainerConfig
from flywheel.policy.batching import MicroBatch, plan, total_length
from flywheel.policy.chunked import (
    chunked_shared_prompt_logprobs,
    chunked_token_logprobs,
    micro_batch_logprobs,
)
from flywheel.policy.grpo import clipped_pg_loss
from flywheel.policy.logprobs import pad_batch, shared_prompt_logprobs, token_logprobs
from flywheel.policy.trainer import GRPOTrainer, TrainSample


@pytest.fixture(scope="module")
def model(tiny_model):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    m.config.use_cache = False
    return m.train()


def _loss_and_grads(model, logprobs_of):
    """A GRPO loss on the logprobs `logprobs_of()` makes, and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    lp = logprobs_of()
    gen = torch.Generator().manual_seed(0)
    old = lp.detach() + 0.1 * torch.randn(lp.shape, generator=gen)
    weights = (torch.rand(lp.shape, generator=gen) > 0.3).float() / lp.numel()
    loss, _ = clipped_pg_loss(lp, old, torch.tensor([1.0, -0.5, 2.0][: lp.shape[0]]), weights, 0.2, 0.28)
    loss.backward()
    return lp.detach(), loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_same(whole, chunked):
    lp_w, loss_w, grads_w = whole
    lp_c, loss_c, grads_c = chunked
    assert torch.allclose(lp_c, lp_w, atol=1e-5)
    assert loss_c == pytest.approx(loss_w, rel=1e-5, abs=1e-7)
    for name, g in grads_w.items():
        # float32 sums in another order: the error scales with the terms summed (the
        # tensor's scale), not with an element that cancels to near 0 (the tied embedding's
        # gradient, the LM head's over every position plus the input's, has such elements)
        assert torch.allclose(grads_c[name], g, rtol=1e-4, atol=max(1e-6, 1e-5 * g.abs().max().item())), name


def test_chunked_logprobs_give_the_loss_and_gradients_of_the_whole_logits(model):
    """Three padded rows, the shared prompt skipped (`first`), 7 rows x positions a chunk
    (2 positions each: 15 chunks), against policy/logprobs.py's whole logits."""
    seqs = [[1] + list(range(100, 100 + n)) for n in (20, 13, 31)]
    ids, mask = pad_batch(seqs)
    whole = _loss_and_grads(model, lambda: token_logprobs(model, ids, mask, 5))
    _assert_same(whole, _loss_and_grads(model, lambda: chunked_token_logprobs(model, ids, mask, 5, 7)))
    no_first = _loss_and_grads(model, lambda: token_logprobs(model, ids, mask))
    _assert_same(no_first, _loss_and_grads(model, lambda: chunked_token_logprobs(model, ids, mask, 0, 1)))


def test_chunked_shared_prompt_logprobs_match_too(model):
    prompt, comps = [1, 2, 3, 4], [[300, 301, 302, 303], [400, 401], [500, 501, 502, 503, 504, 505]]
    whole = _loss_and_grads(model, lambda: shared_prompt_logprobs(model, prompt, comps))
    chunked = _loss_and_grads(model, lambda: chunked_shared_prompt_logprobs(model, prompt, comps, "cpu", 5))
    _assert_same(whole, chunked)


def test_short_micro_batches_keep_the_whole_logits_path(model, monkeypatch):
    """Within `chunk_tokens` nothing changes: policy/logprobs.py's path, as before."""
    import flywheel.policy.chunked as chunked

    def refuse(*args, **kwargs):
        raise AssertionError("chunked")

    monkeypatch.setattr(chunked, "chunked_token_logprobs", refuse)
    batch = MicroBatch([TrainSample([1, 2, 3], [4, 5, 6], [0.0] * 3, 1.0)], shared_prompt=False)
    with torch.no_grad():
        micro_batch_logprobs(model, batch, "cpu", 2048)
        micro_batch_logprobs(model, batch, "cpu", None)
        with pytest.raises(AssertionError, match="chunked"):
            micro_batch_logprobs(model, batch, "cpu", 2)


def _batch() -> list[TrainSample]:
    """Two groups of one prompt (shared-prompt micro-batches on CPU), single prompts, and one
    sample longer than a 40-token budget."""
    rng = random.Random(0)
    batch = []
    for g, prompt in enumerate(([1, 100, 200], [1, 150, 250, 350])):
        for i in range(3):
            n = rng.randint(4, 12)
            batch.append(TrainSample(prompt, [300 + g + i] * n, [-3.0] * n, (-1.0) ** i))
    for i in range(3):
        n = rng.randint(3, 10)
        batch.append(TrainSample([1, 400 + i], [500 + i] * n, [-2.5] * n, 0.5 - i))
    batch.append(TrainSample([1, 5, 6], list(range(700, 760)), [-3.0] * 60, 1.0))
    return batch


@pytest.mark.parametrize("bf16", [False, True])
def test_a_step_is_the_same_with_chunks_and_checkpointing(tiny_model, bf16):
    """The ZeRO-3 trainer, one step on one batch: whole logits and every activation kept,
    against logits 8 rows x positions at a time with the long sample checkpointed (the
    default), against checkpointing everywhere (sharing then off): the same loss and weights."""
    probe = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    results = {}
    for name, knobs in {
        "whole": dict(logits_chunk_tokens=None, gradient_checkpointing=False),
        "chunked": dict(logits_chunk_tokens=8),
        "checkpointed": dict(logits_chunk_tokens=8, gradient_checkpointing=True),
    }.items():
        cfg = TrainerConfig(learning_rate=1e-2, micro_batch_tokens=40, bf16=bf16, **knobs)
        trainer = GRPOTrainer(tiny_model, cfg)
        metrics = trainer.step(_batch())
        results[name] = (metrics, trainer.logprobs(probe, [1])[0])
    whole_metrics, whole_lp = results["whole"]
    assert whole_metrics["shared_prompt_micro_batches"] == 2
    assert results["checkpointed"][0]["shared_prompt_micro_batches"] == 0
    tol = 2e-2 if bf16 else 1e-5
    for name in ("chunked", "checkpointed"):
        metrics, lp = results[name]
        assert metrics["loss"] == pytest.approx(whole_metrics["loss"], rel=tol, abs=1e-6), name
        assert lp == pytest.approx(whole_lp, abs=tol), name
        assert metrics["peak_rss_gib"] > 0


def test_micro_batches_pack_to_the_budget_and_lose_no_sample():
    """Short samples packed (several to a micro-batch) within the budget, shared-prompt groups
    too; a sample longer than the budget alone, never shared, never split."""
    batch = _batch()
    for share_from in (0, None):
        batches = plan(batch, 40, share_from)
        seen = [id(s) for b in batches for s in b.samples]
        assert sorted(seen) == sorted(map(id, batch))  # each sample once
        for b in batches:
            real, padded = b.tokens()
            assert padded <= 40 or (len(b.samples) == 1 and not b.shared_prompt)
        assert any(len(b.samples) > 1 for b in batches if not b.shared_prompt)
        (long,) = [b for b in batches if any(total_length(s) > 40 for s in b.samples)]
        assert len(long.samples) == 1 and not long.shared_prompt and long.tokens() == (63, 63)
    assert sum(b.shared_prompt for b in plan(batch, 40, 0)) == 2


def test_checkpointing_turns_prompt_sharing_off(tiny_model):
    with pytest.raises(ValidationError, match="share_prompt"):
        TrainerConfig(share_prompt=True, gradient_checkpointing=True)
    assert GRPOTrainer(tiny_model, TrainerConfig(gradient_checkpointing=True)).min_shared_prompt() is None


def _rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def test_a_long_sample_trains_in_bounded_memory(tiny_model):
    """One 4k-token sample on the tiny model (49k vocabulary: its whole logits are 0.8 GB a
    copy): the step's peak above the memory held before it, chunked by 256 against whole."""
    rng = random.Random(0)
    ids = [rng.randrange(49152) for _ in range(4096)]
    long = TrainSample(ids[:256], ids[256:], [-2.0] * 3840, 1.0)
    growth = {}
    variants = {"chunked": dict(logits_chunk_tokens=256), "whole": dict(logits_chunk_tokens=None)}
    for name, knobs in variants.items():
        trainer = GRPOTrainer(tiny_model, TrainerConfig(learning_rate=1e-4, **knobs))
        trainer.step([TrainSample(ids[:16], ids[16:64], [-2.0] * 48, 1.0)])  # gradients, AdamW's moments
        before = _rss_gib()
        growth[name] = trainer.step([long])["peak_rss_gib"] - before
        del trainer
    assert growth["whole"] > 1.0  # the logits, their log-softmax and gradients
    assert growth["chunked"] < 0.3 * growth["whole"], growth
