"""`trainer.zero_stage` (policy/trainer.py) on the real DeepSpeed trainer and the tiny model:
stage 0 (one process, nothing sharded) makes ZeRO-3's update, resumes from its own
checkpoint, and under bf16 casts the weights once per step with the same numbers as a
cast per forward."""

import contextlib

import pytest
import torch
from flywheel.policy.ds_config import checkpoint_layout, layout
from flywheel.policy.trainer import GRPOTrainer, TrainSample

from flywheel.config import TrainerConfig

PROBE = [[1, 2, 3, 4, 5, 6, 7]]


def _batch() -> list[TrainSample]:
    """Two groups of three (shared prompts) and a lone sample: several micro-batches a step."""
    return [
        TrainSample([1, 50 + g, 60, 70, 80], [300 + i] * (2 + i), [-3.0] * (2 + i), (-1.0) ** i)
        for g in range(2)
        for i in range(3)
    ] + [TrainSample([1, 90], [400, 401], [-3.0, -3.0], 0.5)]


def _trainer(model: str, **kw) -> GRPOTrainer:
    return GRPOTrainer(model, TrainerConfig(learning_rate=1e-2, micro_batch_tokens=24, **kw))


def test_stage_0_makes_zero_3s_update(tiny_model):
    after = {}
    for stage in (3, 0):
        trainer = _trainer(tiny_model, zero_stage=stage)
        assert trainer.ds_config["zero_optimization"]["stage"] == stage and trainer.stage == stage
        metrics = [trainer.step(_batch()) for _ in range(2)]
        assert metrics[0]["micro_batches"] >= 3
        after[stage] = (metrics[-1]["loss"], trainer.logprobs(PROBE, [1])[0])
    assert after[0][0] == pytest.approx(after[3][0], abs=1e-5)
    assert after[0][1] == pytest.approx(after[3][1], abs=1e-4)


def test_stage_0_resumes_exactly_from_its_checkpoint(tiny_model, tmp_path):
    trainer = _trainer(tiny_model, zero_stage=0)
    trainer.step(_batch())
    trainer.save_checkpoint(tmp_path, "v1")
    trainer.step(_batch())
    expected = trainer.logprobs(PROBE, [1])[0]
    resumed = _trainer(tiny_model, zero_stage=0)
    resumed.load_checkpoint(tmp_path, "v1")
    resumed.step(_batch())
    assert resumed.logprobs(PROBE, [1])[0] == pytest.approx(expected, abs=1e-6)


def test_one_bf16_cast_per_step_gives_the_numbers_of_a_cast_per_forward(tiny_model, monkeypatch):
    """The step's one autocast region (stage 0, bf16) against the trainer with that region
    off, so each forward casts the weights again: the same gradients, the same weights."""
    grads, weights, casts = [], [], []
    for once in (True, False):
        trainer = _trainer(tiny_model, zero_stage=0, bf16=True)
        if not once:
            monkeypatch.setattr(trainer, "_weights_cast_once", contextlib.nullcontext)
        engine, captured = trainer.engine, {}
        step = engine.step

        def keep_grads(step=step, engine=engine, captured=captured):
            captured.update({n: p.grad.clone() for n, p in engine.module.named_parameters()})
            step()

        monkeypatch.setattr(engine, "step", keep_grads)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            metrics = trainer.step(_batch())
        assert metrics["micro_batches"] >= 3
        casts.append(sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy"))
        grads.append(captured)
        weights.append({n: p.detach().clone() for n, p in engine.module.named_parameters()})
    assert casts[0] < casts[1]  # the region saves casts
    for name in grads[0]:
        assert torch.equal(grads[0][name], grads[1][name]), name
        assert torch.equal(weights[0][name], weights[1][name]), name


def test_zero_3_keeps_a_cast_per_forward(tiny_model):
    trainer = _trainer(tiny_model, bf16=True)
    assert trainer.stage == 3 and isinstance(trainer._weights_cast_once(), contextlib.nullcontext)


def test_a_checkpoint_of_the_other_stage_is_refused_with_the_setting_to_use(tiny_model, tmp_path):
    trainer = _trainer(tiny_model, zero_stage=3)
    trainer.step(_batch())
    trainer.save_checkpoint(tmp_path, "v1")
    with pytest.raises(RuntimeError, match="written at ZeRO stage 3.*runs stage 0.*trainer.zero_stage: 3"):
        _trainer(tiny_model, zero_stage=0).load_checkpoint(tmp_path, "v1")
    assert checkpoint_layout([p.name for p in (tmp_path / "v1").glob("*.pt")]) == "3"
    whole = _trainer(tiny_model, zero_stage=0)
    whole.step(_batch())
    whole.save_checkpoint(tmp_path, "v2")
    assert checkpoint_layout([p.name for p in (tmp_path / "v2").glob("*.pt")]) == "0"
    with pytest.raises(RuntimeError, match="written at ZeRO stage 0.*runs stage 3.*trainer.zero_stage: 0"):
        _trainer(tiny_model, zero_stage=3).load_checkpoint(tmp_path, "v2")


def test_checkpoint_layouts_from_deepspeeds_file_names():
    """Pure naming logic (DeepSpeed's `_get_ckpt_name` and `_get_zero_ckpt_prefix`): stages 1
    and 2 keep one model-states file and per-rank optimizer states, so a stage-3 trainer
    cannot read them, nor they its per-rank model states."""
    assert checkpoint_layout(["mp_rank_00_model_states.pt"]) == "0"
    assert (
        checkpoint_layout(["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"])
        == "1-2"
    )
    assert (
        checkpoint_layout(["mp_rank_00_model_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"])
        == "1-2"
    )
    assert checkpoint_layout(["zero_pp_rank_0_mp_rank_00_model_states.pt",
                              "zero_pp_rank_0_mp_rank_00_optim_states.pt"]) == "3"  # fmt: skip
    assert checkpoint_layout([]) is None
    assert [layout(s) for s in (0, 1, 2, 3)] == ["0", "1-2", "1-2", "3"]
