"""On-policy distillation: the reverse-KL term by hand, the teacher as a scoring engine,
and the real trainer on CPU with two tiny random-weight models sharing the real tokenizer
(the student: conftest's tiny_model; the teacher: the same shape, another seed)."""

import math

import pytest
import torch

from flywheel.config import DistillConfig, FlywheelConfig, TrainerConfig, apply_overrides
from flywheel.policy.grpo import clipped_pg_loss, reverse_kl_loss
from flywheel.policy.teacher import Teacher, TeacherError, check_teacher
from flywheel.policy.trainer import GRPOTrainer, TrainSample


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory) -> str:
    from flywheel.run.model_prep import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("teacher") / "tiny-teacher", seed=1)


def fp32(teacher_dir: str, batch_tokens: int = 4096, min_shared_prompt="auto") -> Teacher:
    return Teacher(teacher_dir, DistillConfig(mode="only", teacher=teacher_dir, dtype="float32",
                                              batch_tokens=batch_tokens, device="cpu"), min_shared_prompt)  # fmt: skip


# ---- the loss term by hand ------------------------------------------------------------------


def test_reverse_kl_is_zero_when_teacher_is_student_and_positive_otherwise():
    """A one-token toy: the student's distribution over two tokens is p = (.5, .5), the
    teacher's q = (.9, .1). Each row samples one token; weighting the rows by how likely the
    student samples them makes the estimator's expectation exact: sum_y p(y) log(p(y)/q(y))
    = .5 ln(.5/.9) + .5 ln(.5/.1) = 0.5108 nats, the reverse KL(p || q)."""
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1])
    new = p.log().unsqueeze(-1).requires_grad_(True)  # [2 rows, 1 token]: token 0, token 1
    teacher = q.log().unsqueeze(-1)
    weights = p.unsqueeze(-1)
    by_hand = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert by_hand == pytest.approx(0.5108, abs=1e-4)

    loss, stats = reverse_kl_loss(new, new.detach(), teacher, weights)
    assert loss.item() == pytest.approx(by_hand, abs=1e-6) and loss.item() > 0
    assert stats["kl"] == pytest.approx((math.log(0.5 / 0.9) + math.log(0.5 / 0.1)) / 2, abs=1e-6)
    loss.backward()  # d/d logp_t = w_t * kl_t: down where the student likes a token more than the teacher
    assert new.grad.squeeze(-1).tolist() == pytest.approx([0.5 * math.log(0.5 / 0.9), 0.5 * math.log(5.0)])

    same = new.detach().clone().requires_grad_(True)
    zero, stats = reverse_kl_loss(same, same.detach(), same.detach(), weights)
    zero.backward()
    assert zero.item() == 0.0 and stats["kl"] == 0.0 and not same.grad.any()


def test_per_token_advantages_broadcast_like_per_sequence_ones():
    """GRPO's advantage per sequence is the same loss as that advantage at every token,
    bit for bit: the per-token form the distillation term uses changes nothing for GRPO."""
    g = torch.Generator().manual_seed(0)
    new, old = torch.randn(3, 5, generator=g) - 2, torch.randn(3, 5, generator=g) - 2
    adv, weights = torch.tensor([1.0, -0.5, 0.0]), torch.rand(3, 5, generator=g)
    seq, _ = clipped_pg_loss(new, old, adv, weights, 0.2, 0.28)
    tok, _ = clipped_pg_loss(new, old, adv.unsqueeze(-1).expand(3, 5), weights, 0.2, 0.28)
    assert torch.equal(seq, tok)


# ---- the teacher as a scoring engine --------------------------------------------------------


def test_teacher_scores_as_the_trainer_does_in_any_batching(tiny_model, tiny_teacher):
    """The student as its own teacher (float32) scores its tokens as the trainer does, so the
    reverse KL is 0; a budget of one sequence per forward gives the same scores; bf16 is
    float32 up to rounding."""
    trainer = GRPOTrainer(tiny_model, TrainerConfig(learning_rate=0.0))
    prompts = [[1, 100, 200, 300], [1, 7], [1, 100, 200, 300]]
    completions = [[400, 401, 402], [500, 501, 502, 503, 504], [600]]
    own = trainer.logprobs([p + c for p, c in zip(prompts, completions)], [len(p) for p in prompts])
    scored = fp32(tiny_model).score(prompts, completions)
    assert [len(s) for s in scored] == [3, 5, 1]
    for a, b in zip(scored, own):
        assert a == pytest.approx(b, abs=1e-5)
    for a, b in zip(fp32(tiny_model, batch_tokens=1).score(prompts, completions), scored):
        assert a == pytest.approx(b, abs=1e-5)
    bf16 = Teacher(tiny_model, DistillConfig(mode="only", teacher=tiny_model, device="cpu"))
    bf16 = bf16.score(prompts, completions)
    assert bf16[1] == pytest.approx(scored[1], abs=0.1)
    other = fp32(tiny_teacher).score(prompts, completions)
    assert max(abs(a - b) for u, v in zip(other, scored) for a, b in zip(u, v)) > 1e-2


def test_a_groups_prompt_runs_once_with_the_same_scores(tiny_model):
    """Two groups of three samples: with sharing each prompt runs once on CPU (the count of
    tokens the teacher ran says so), and every score is the unshared one's."""
    prompts = [[1, 100, 200, 300, 301, 302]] * 3 + [[1, 7, 8, 9]] * 3
    completions = [[400, 401, 402], [410], [420, 421, 422, 423], [500, 501], [510, 511, 512], [520]]
    samples = [TrainSample(p, c, [0.0] * len(c), 0.0) for p, c in zip(prompts, completions)]
    alone = fp32(tiny_model, min_shared_prompt=None).annotate(samples)
    alone_lps = [s.teacher_logprobs for s in samples]
    shared = fp32(tiny_model).annotate(samples)
    for a, b in zip(alone_lps, [s.teacher_logprobs for s in samples]):
        assert a == pytest.approx(b, abs=1e-5)
    body = sum(map(len, completions))
    assert alone["teacher_tokens"] == sum(map(len, prompts)) + body
    assert shared["teacher_tokens"] == 6 + 4 + body


def test_a_teacher_with_another_vocabulary_is_refused(tiny_model, tiny_teacher, tmp_path):
    from transformers import AutoTokenizer

    check_teacher(tiny_teacher, tiny_model)  # the same tokenizer: fine
    tok = AutoTokenizer.from_pretrained(tiny_teacher)
    tok.add_tokens(["<not-in-the-student>"])
    tok.save_pretrained(tmp_path)
    with pytest.raises(TeacherError, match="another vocabulary"):
        check_teacher(str(tmp_path), tiny_model)


def test_distill_needs_a_teacher():
    with pytest.raises(ValueError, match="needs distill.teacher"):
        FlywheelConfig(distill={"mode": "add"})
    assert FlywheelConfig().distill.mode == "off"
    assert apply_overrides(FlywheelConfig(), ["distill.mode=off"]).distill.mode == "off"  # YAML's false


# ---- the real trainer -----------------------------------------------------------------------


@torch.no_grad()
def student_samples(model_dir: str, prompts: list, n: int, tokens: int, seed: int) -> list[TrainSample]:
    """n samples of `tokens` tokens per prompt, drawn from the model's whole distribution,
    with the sampler's logprobs and GRPO-style advantages of a made-up reward (+1, -1, ...).
    Not the HF engine's: transformers' `generate` samples from the top 50 tokens by default
    (measured on the tiny model: mean sampled logprob -10.04, above the 50th token's -10.13,
    against -10.78 for the whole distribution), and the estimator assumes the full policy."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for prompt in prompts:
        ids, lps = torch.tensor([prompt] * n), []
        for _ in range(tokens):
            logp = model(input_ids=ids).logits[:, -1].float().log_softmax(-1)
            pick = torch.multinomial(logp.exp(), 1, generator=gen)
            ids, lps = torch.cat([ids, pick], 1), lps + [logp.gather(1, pick)]
        lps = torch.cat(lps, 1).tolist()
        out += [TrainSample(prompt, row[len(prompt) :], lp, (-1.0) ** i)
                for i, (row, lp) in enumerate(zip(ids.tolist(), lps))]  # fmt: skip
    return out


PROMPTS = [[1, 100, 200, 300], [1, 50, 60], [1, 7, 8, 9], [1, 3000, 4000]]


def scored_batch(student_dir: str, teacher_dir: str, n: int = 4, seed: int = 0) -> list[TrainSample]:
    samples = student_samples(student_dir, PROMPTS, n, 6, seed)
    fp32(teacher_dir).annotate(samples)
    return samples


def with_old(samples: list[TrainSample], old: list[list[float]]) -> list[TrainSample]:
    return [TrainSample(s.prompt_ids, s.completion_ids, o, s.advantage, teacher_logprobs=s.teacher_logprobs)
            for s, o in zip(samples, old)]  # fmt: skip


def test_only_mode_moves_the_students_logprobs_of_its_samples_toward_the_teachers(tiny_model, tiny_teacher):
    """A few real optimisation steps of the DeepSpeed trainer with the reverse KL as the only
    signal (the made-up rewards' advantages ignored) on the student's own samples: the
    student's logprobs of the sampled tokens come closer to the teacher's, and the reverse-KL
    estimate on them (the loss's value) falls from positive toward 0. (On samples held fixed
    it is no KL: it turns negative once the student undershoots on those tokens; the next
    test trains on fresh samples.)"""
    samples = scored_batch(tiny_model, tiny_teacher)
    seqs, lens = [s.prompt_ids + s.completion_ids for s in samples], [len(s.prompt_ids) for s in samples]
    teacher_lp = [s.teacher_logprobs for s in samples]
    trainer = GRPOTrainer(tiny_model, TrainerConfig(learning_rate=3e-4),
                          distill=DistillConfig(mode="only", teacher=tiny_teacher))  # fmt: skip

    def gap(lps) -> float:
        return sum(abs(a - b) for u, v in zip(lps, teacher_lp) for a, b in zip(u, v)) / sum(map(len, lps))

    gaps, estimates = [], []
    for _ in range(3):  # each step's ratio against the policy as it stands
        now = trainer.logprobs(seqs, lens)
        gaps.append(gap(now))
        estimates.append(trainer.step(with_old(samples, now))["distill_kl"])
    gaps.append(gap(trainer.logprobs(seqs, lens)))
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 0.5 * gaps[0], gaps
    assert estimates[0] > 0 and estimates == sorted(estimates, reverse=True)
    assert abs(estimates[-1]) < estimates[0]


def sharpened(model_dir: str, out) -> str:
    """The model with its logits scaled by 10 (the final norm's weight): a low-entropy
    distribution, as a trained LM's is. The tiny models' own are nearly uniform over 49k
    tokens, where one sampled token says little about the KL: measured, the estimator's
    gradient had cosine 0.03-0.07 with the exact KL's at 128-1024 sampled tokens, and 0.37
    at 512 with the logits scaled by 10."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(10.0)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return str(out)


def exact_reverse_kl(student_dir: str, teacher_dir: str, samples: list[TrainSample]) -> float:
    """KL(student || teacher) over the whole vocabulary at every completion position of
    `samples`, averaged: what the sampled-token estimator estimates."""
    from transformers import AutoModelForCausalLM

    student, teacher = (
        AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32) for d in (student_dir, teacher_dir)
    )
    total, n = 0.0, 0
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            cut = slice(len(s.prompt_ids) - 1, ids.shape[1] - 1)
            ls = student(input_ids=ids).logits[0, cut].float().log_softmax(-1)
            lt = teacher(input_ids=ids).logits[0, cut].float().log_softmax(-1)
            total += float((ls.exp() * (ls - lt)).sum())
            n += len(s.completion_ids)
    return total / n


def test_on_policy_distillation_lowers_the_reverse_kl(tiny_model, tiny_teacher, tmp_path):
    """On-policy: each step samples from the student as it stands (its export, as the engine
    would hold it), the teacher scores the samples, the trainer takes one step. The exact
    reverse KL on held-out prefixes (the starting student's samples) falls step after step."""
    student = sharpened(tiny_model, tmp_path / "student")
    teacher_dir = sharpened(tiny_teacher, tmp_path / "teacher")
    probe = student_samples(student, PROMPTS, 4, 6, seed=123)
    trainer = GRPOTrainer(student, TrainerConfig(learning_rate=5e-5),
                          distill=DistillConfig(mode="only", teacher=teacher_dir))  # fmt: skip
    current, kls = student, [exact_reverse_kl(student, teacher_dir, probe)]
    for step in range(5):
        trainer.step(scored_batch(current, teacher_dir, n=8, seed=step))
        current = trainer.export(tmp_path / f"v{step + 1}")
        kls.append(exact_reverse_kl(current, teacher_dir, probe))
    assert kls == sorted(kls, reverse=True) and kls[-1] < kls[0] - 0.03, kls  # measured: 3.745 -> 3.677


def test_add_is_grpo_plus_weight_times_the_reverse_kl_and_off_is_grpo_bit_for_bit(tiny_model, tiny_teacher):
    """From the same weights and batch: add's loss = GRPO's + weight x only's (weight 1, no
    reference KL: only's loss is the term alone); off (or no distill at all) is GRPO's step
    bit for bit, teacher logprobs or not; a sample the teacher did not score is refused."""
    samples = scored_batch(tiny_model, tiny_teacher, n=2)
    cfg = TrainerConfig(learning_rate=1e-2, micro_batch_tokens=24)  # several micro-batches

    def step(distill, batch=samples):
        trainer = GRPOTrainer(tiny_model, cfg, distill=distill)
        metrics = trainer.step(batch)
        return metrics, trainer.logprobs([[1, 2, 3, 4, 5, 6]], [1])[0]

    grpo, grpo_after = step(None)
    only, _ = step(DistillConfig(mode="only", teacher=tiny_teacher))
    add, _ = step(DistillConfig(mode="add", teacher=tiny_teacher, weight=0.3))
    assert add["loss"] == pytest.approx(grpo["loss"] + 0.3 * only["loss"], rel=1e-5, abs=1e-7)
    assert only["distill_kl"] == pytest.approx(add["distill_kl"]) and "distill_kl" not in grpo
    assert abs(only["loss"]) > 1e-4

    off, off_after = step(DistillConfig(mode="off", teacher=tiny_teacher))
    plain = [TrainSample(s.prompt_ids, s.completion_ids, s.old_logprobs, s.advantage) for s in samples]
    bare, bare_after = step(None, plain)
    assert off["loss"] == grpo["loss"] == bare["loss"]
    assert off_after == grpo_after == bare_after

    with pytest.raises(ValueError, match="lack teacher logprobs"):
        step(DistillConfig(mode="add", teacher=tiny_teacher), plain)
