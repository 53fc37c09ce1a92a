"""The plain-torch trainer (policy/plain_trainer.py), GRPOTrainer's step without DeepSpeed:
from the same weights and batch it takes the same steps as the ZeRO-3 trainer (one process
on CPU), in float32 and under bf16 autocast; its export reloads to its own logprobs, with
LoRA too, and a checkpoint restores weights and optimizer state."""

from __future__ import annotations

import pytest
import torch

from flywheel.config import TrainerConfig
from flywheel.config.training import LoraConfig
from flywheel.policy.plain_trainer import PlainTrainer
from flywheel.policy.trainer import GRPOTrainer, TrainSample

PROMPT = [1, 100, 200, 300, 7, 8]
SEQS = [PROMPT + [400, 401, 402], PROMPT + [500, 501], [1, 9, 10, 11, 12]]
LENS = [len(PROMPT), len(PROMPT), 2]


def batch(trainer) -> list[TrainSample]:
    old = trainer.logprobs(SEQS, LENS)
    return [TrainSample(s[:n], s[n:], lp, adv) for s, n, lp, adv in zip(SEQS, LENS, old, (1.0, -1.0, 0.5))]


@pytest.mark.parametrize("bf16", [False, True])
def test_it_steps_as_the_zero3_trainer_does(tiny_model, bf16):
    cfg = TrainerConfig(learning_rate=5e-3, micro_batch_tokens=12, bf16=bf16)  # several micro-batches
    plain, zero3 = PlainTrainer(tiny_model, cfg), GRPOTrainer(tiny_model, cfg)
    assert plain.bf16 == zero3.bf16 == bf16
    samples = batch(zero3)
    for _ in range(2):
        got, want = plain.step(samples), zero3.step(samples)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)
        assert got["micro_batches"] == want["micro_batches"] > 1
    tol = 2e-3 if bf16 else 1e-5
    for a, b in zip(plain.logprobs(SEQS, LENS), zero3.logprobs(SEQS, LENS)):
        assert a == pytest.approx(b, abs=tol)
    moved = plain.logprobs(SEQS, LENS)
    assert sum(moved[0]) > sum(samples[0].old_logprobs) and sum(moved[1]) < sum(samples[1].old_logprobs)


def test_exports_reload_and_checkpoints_restore(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    from flywheel.policy.logprobs import sequence_logprobs

    trainer = PlainTrainer(tiny_model, TrainerConfig(learning_rate=5e-3, lora=LoraConfig(r=4, alpha=8)))
    samples = batch(trainer)
    trainer.step(samples)
    out = trainer.export(tmp_path / "v1")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    for a, b in zip(sequence_logprobs(model, SEQS, LENS), trainer.logprobs(SEQS, LENS)):
        assert a == pytest.approx(b, abs=1e-5)  # the adapter merged in
    assert (tmp_path / "v1" / "adapter" / "adapter_config.json").is_file()
    trainer.save_checkpoint(tmp_path / "ckpt", "v1")
    trainer.step(samples)
    after_two = trainer.logprobs(SEQS, LENS)
    again = PlainTrainer(tiny_model, TrainerConfig(learning_rate=5e-3, lora=LoraConfig(r=4, alpha=8)))
    again.load_checkpoint(tmp_path / "ckpt", "v1")
    again.step(samples)  # the second step from the restored first: AdamW's moments came back too
    for a, b in zip(again.logprobs(SEQS, LENS), after_two):
        assert a == pytest.approx(b, abs=1e-6)
    with pytest.raises(RuntimeError, match="no plain-torch checkpoint 'v9'"):
        again.load_checkpoint(tmp_path / "ckpt", "v9")
