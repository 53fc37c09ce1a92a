"""The DeepSpeed ZeRO-3 GRPO trainer on CPU with a tiny model: a step moves logprobs the
way the advantages say, exports load back identically, micro-batches are balanced."""

from pathlib import Path

import pytest
import torch

from flywheel.config import TrainerConfig
from flywheel.policy.batching import micro_batches
from flywheel.policy.trainer import GRPOTrainer, TrainSample


def test_micro_batches_respect_the_token_budget():
    samples = [TrainSample([1] * n, [2] * n, [0.0] * n, 0.0) for n in (9, 1, 5, 3, 7, 2)]
    chunks = micro_batches(samples, max_tokens=20)
    assert sorted(len(s.prompt_ids) for c in chunks for s in c) == [1, 2, 3, 5, 7, 9]
    for chunk in chunks:
        lengths = [2 * len(s.prompt_ids) for s in chunk]
        assert lengths == sorted(lengths) and (len(chunk) == 1 or len(chunk) * max(lengths) <= 20)
    assert len(micro_batches(samples, max_tokens=10**6)) == 1


@pytest.fixture(scope="module")
def trainer(tiny_model):
    return GRPOTrainer(tiny_model, TrainerConfig(learning_rate=5e-3, micro_batch_tokens=12))


def test_step_follows_the_advantages(trainer):
    prompt = [1, 100, 200, 300]
    good, bad = [400, 401, 402], [500, 501, 502]
    seqs, lens = [prompt + good, prompt + bad], [len(prompt)] * 2
    before = trainer.logprobs(seqs, lens)
    batch = [
        TrainSample(prompt, good, before[0], +1.0),
        TrainSample(prompt, bad, before[1], -1.0),
    ]
    for _ in range(3):
        metrics = trainer.step(batch)
    after = trainer.logprobs(seqs, lens)
    assert sum(after[0]) > sum(before[0]) + 0.1
    assert sum(after[1]) < sum(before[1]) - 0.1
    assert metrics["completion_tokens"] == 6 and 0 <= metrics["padding_fraction"] < 1


def test_export_outlives_the_dir_it_started_from(tiny_model, tmp_path):
    """A trainer started from a policy version keeps exporting after the policy store has
    pruned that version's dir (it did, after an SFT cold start: FileNotFoundError)."""
    import shutil

    from transformers import AutoTokenizer

    start = tmp_path / "v1-hf"
    shutil.copytree(tiny_model, start)
    own = GRPOTrainer(str(start), TrainerConfig(learning_rate=5e-3))
    shutil.rmtree(start)
    out = own.export(tmp_path / "v2-hf")
    assert AutoTokenizer.from_pretrained(out).encode("hello") == AutoTokenizer.from_pretrained(
        tiny_model
    ).encode("hello")
    assert {p.name for p in Path(tiny_model).iterdir() if not p.name.endswith(".safetensors")} <= {
        p.name for p in Path(out).iterdir()
    }


def test_export_reloads_to_the_same_logprobs(trainer, tmp_path):
    from transformers import AutoModelForCausalLM

    from flywheel.policy.logprobs import sequence_logprobs

    out = trainer.export(tmp_path / "export")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    seqs, lens = [[1, 2, 3, 4, 5, 6]], [2]
    assert sequence_logprobs(model, seqs, lens)[0] == pytest.approx(trainer.logprobs(seqs, lens)[0], abs=1e-5)


def test_empty_batch_is_refused(trainer):
    with pytest.raises(ValueError, match="at least one"):
        trainer.step([])


def test_kl_penalty_to_the_starting_policy(tiny_model):
    cfg = TrainerConfig(learning_rate=5e-3, kl_coef=0.1, loss_aggregation="seq_mean", clip_eps_high=0.28)
    trainer = GRPOTrainer(tiny_model, cfg)
    prompt, completion = [1, 100, 200], [300, 301]
    old = trainer.logprobs([prompt + completion], [len(prompt)])[0]
    first = trainer.step([TrainSample(prompt, completion, old, 1.0)])
    second = trainer.step([TrainSample(prompt, completion, old, 1.0)])
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # still the starting policy
    assert second["kl"] > 0  # moved away from it, and the penalty sees it


def test_update_does_not_depend_on_the_micro_batch_budget(tiny_model):
    """Same batch, one micro-batch vs one per sequence: the same weights after a step."""
    batch = [
        TrainSample([1, 100 + i, 200], [300 + i] * (2 + i), [-3.0] * (2 + i), (-1.0) ** i) for i in range(4)
    ]
    results = []
    for budget in (10**6, 1):
        trainer = GRPOTrainer(tiny_model, TrainerConfig(learning_rate=1e-2, micro_batch_tokens=budget))
        metrics = trainer.step(batch)
        results.append((metrics["micro_batches"], trainer.logprobs([[1, 2, 3, 4, 5]], [1])[0]))
    (n_big, lp_big), (n_small, lp_small) = results
    assert (n_big, n_small) == (1, 4)
    assert lp_small == pytest.approx(lp_big, abs=1e-4)


def test_micro_batches_cut_where_padding_is_least():
    lengths = [10, 10, 10, 100, 100]  # greedy filling would put a 10 with the 100s
    samples = [TrainSample([1] * n, [], [], 0.0) for n in lengths]
    chunks = micro_batches(samples, max_tokens=1000, overhead_tokens=5)
    assert [[len(s.prompt_ids) for s in c] for c in chunks] == [[10, 10, 10], [100, 100]]


def test_stale_samples_are_weighted_by_the_truncated_importance_ratio(tiny_model):
    """One sample whose behaviour logprobs are 3 nats below the current policy's, A = 1,
    token-mean loss. On-policy it would be clipped at 1 + 0.28; one update old it is
    clipped against the current policy (ratio 1) and weighted by min(e^3, cap = 2)."""
    prompt, completion = [1, 100, 200], [300, 301, 302]
    trainer = GRPOTrainer(tiny_model, TrainerConfig(learning_rate=0.0, clip_eps_high=0.28))
    current = trainer.logprobs([prompt + completion], [len(prompt)])[0]
    behaviour = [lp - 3.0 for lp in current]

    def loss(lag, correction="truncated_is", old=behaviour, mismatch=False):
        trainer.cfg.off_policy_correction = correction
        return trainer.step(
            [TrainSample(prompt, completion, old, 1.0, policy_lag=lag, engine_mismatch=mismatch)]
        )

    assert loss(0, old=current)["loss"] == pytest.approx(-1.0, abs=1e-4)  # ratio 1
    assert loss(0)["loss"] == pytest.approx(-1.28, abs=1e-4)  # an uncorrected stale sample: clip-higher
    stale = loss(1)
    assert stale["loss"] == pytest.approx(-2.0, abs=1e-4) and stale["is_weight_mean"] == pytest.approx(2.0)
    assert stale["off_policy_samples"] == 1
    assert loss(1, correction="none")["loss"] == pytest.approx(-1.28, abs=1e-4)  # correction off
    # sampled by an engine with other numerics (bf16 rollouts), not stale: corrected the same way
    mismatched = loss(0, mismatch=True)
    assert mismatched["loss"] == pytest.approx(-2.0, abs=1e-4) and mismatched["engine_mismatch_samples"] == 1


def test_logprobs_from_a_first_position_match_the_full_pass(tiny_model):
    """The trainer makes no logits for the positions every prompt of a micro-batch holds
    (`first`); the logprobs it does make are the full pass's."""
    from transformers import AutoModelForCausalLM

    from flywheel.policy.logprobs import pad_batch, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    ids, mask = pad_batch([list(range(5, 40)), list(range(100, 120))])
    with torch.no_grad():
        full = token_logprobs(model, ids, mask)
        cut = token_logprobs(model, ids, mask, first=12)
    assert cut.shape == full.shape and torch.equal(cut[:, :12], torch.zeros(2, 12))
    torch.testing.assert_close(cut[:, 12:], full[:, 12:], rtol=1e-5, atol=1e-5)


def test_logprobs_from_a_first_position_without_logits_to_keep(tiny_model):
    """A model class that does not take `logits_to_keep` gets the full pass, cut."""
    from transformers import AutoModelForCausalLM

    from flywheel.policy.logprobs import pad_batch, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()

    def older(input_ids, attention_mask):  # the signature of a model from before the argument
        return model(input_ids=input_ids, attention_mask=attention_mask)

    ids, mask = pad_batch([list(range(5, 40)), list(range(100, 120))])
    with torch.no_grad():
        torch.testing.assert_close(
            token_logprobs(older, ids, mask, first=12), token_logprobs(model, ids, mask, first=12)
        )


def test_shared_prompt_logprobs_and_gradients_match_separate_passes(tiny_model):
    """One prompt run once for three completions of different lengths gives each
    completion token the logprob (and each weight the gradient) of three full passes."""
    from transformers import AutoModelForCausalLM

    from flywheel.policy.logprobs import pad_batch, shared_prompt_logprobs, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model.config.use_cache = False  # as the trainer loads it
    prompt = list(range(5, 25))
    comps = [list(range(100, 107)), list(range(200, 203)), list(range(300, 312))]
    weight = model.model.layers[0].self_attn.q_proj.weight

    def grad_of(total):
        model.zero_grad()
        total.backward()
        return weight.grad.clone()

    shared = shared_prompt_logprobs(model, prompt, comps)
    g_shared = grad_of(sum(shared[i, : len(c)].sum() for i, c in enumerate(comps)))
    ids, mask = pad_batch([prompt + c for c in comps])
    full = token_logprobs(model, ids, mask)
    start = len(prompt) - 1
    g_full = grad_of(sum(full[i, start : start + len(c)].sum() for i, c in enumerate(comps)))
    for i, c in enumerate(comps):
        torch.testing.assert_close(shared[i, : len(c)], full[i, start : start + len(c)], rtol=1e-5, atol=1e-5)
        assert torch.all(shared[i, len(c) :] == 0)
    torch.testing.assert_close(g_shared, g_full, rtol=1e-4, atol=1e-6)


def test_sharing_prompts_makes_the_same_update_on_fewer_tokens(tiny_model):
    """Two groups of three samples and one single sample: with share_prompt the groups run
    their prompts once, and the weights after a step are those of the unshared step."""
    batch = [
        TrainSample([1, 50 + g, 60, 70, 80], [300 + i] * (2 + i), [-3.0] * (2 + i), (-1.0) ** i)
        for g in range(2)
        for i in range(3)
    ] + [TrainSample([1, 90], [400, 401], [-3.0, -3.0], 0.5)]
    results = []
    for share in (False, True):
        trainer = GRPOTrainer(tiny_model, TrainerConfig(learning_rate=1e-2, share_prompt=share))
        metrics = trainer.step(batch)
        results.append((metrics, trainer.logprobs([[1, 2, 3, 4, 5]], [1])[0]))
    (plain, lp_plain), (shared, lp_shared) = results
    assert (plain["shared_prompt_micro_batches"], shared["shared_prompt_micro_batches"]) == (0, 2)
    assert shared["tokens"] == plain["tokens"] - 2 * 2 * 5  # each group's prompt once, not three times
    assert shared["loss"] == pytest.approx(plain["loss"], abs=1e-5)
    assert lp_shared == pytest.approx(lp_plain, abs=1e-4)


def test_a_plan_shares_prompts_splits_long_groups_and_keeps_groups_on_one_rank():
    from flywheel.policy.batching import plan, rank_share

    group = [TrainSample([1] * 10, [2] * n, [0.0] * n, 0.0) for n in (3, 30, 4, 31)]
    lone = [TrainSample([5] * 8, [6] * 5, [0.0] * 5, 0.0), TrainSample([7] * 6, [8] * 2, [0.0] * 2, 0.0)]
    batches = plan(group + lone, max_tokens=10**6, min_shared_prompt=0)
    assert [(b.shared_prompt, len(b.samples)) for b in batches] == [(True, 4), (False, 2)]
    assert batches[0].tokens() == (10 + 68, 10 + 4 * 31)
    tight = plan(group + lone, max_tokens=75, min_shared_prompt=0)  # 4 x 31 > 75 - 10: the long pair apart
    assert [sorted(len(s.completion_ids) for s in b.samples) for b in tight if b.shared_prompt] == [
        [3, 4],
        [30, 31],
    ]
    assert all(not b.shared_prompt for b in plan(group + lone, 10**6, min_shared_prompt=None))
    assert all(not b.shared_prompt for b in plan(group + lone, 10**6, min_shared_prompt=11))  # prompt of 10
    shares = [rank_share(group + lone, r, 2, True) for r in range(2)]
    assert sorted(map(id, shares[0] + shares[1])) == sorted(map(id, group + lone))
    assert any(all(s in share for s in group) for share in shares)  # the group stays whole
