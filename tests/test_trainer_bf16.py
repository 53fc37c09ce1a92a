"""bf16 training (`trainer.bf16`, policy/trainer.py) on the real DeepSpeed ZeRO-3 trainer with
the tiny model: the matmuls run in bf16, while the master weights, the optimizer state and
the export stay float32; the weight-sync check and the off-policy correction follow the
trainer's precision; the float32 default is untouched."""

from pathlib import Path

import pytest
import torch
from flywheel.policy.ds_config import default_ds_config
from flywheel.policy.trainer import GRPOTrainer, TrainSample, uses_bf16
from flywheel.tasks.update import sync_tolerance

from flywheel.config import FlywheelConfig, TrainerConfig

PROMPT, GOOD, BAD = [1, 100, 200, 300], [400, 401, 402], [500, 501, 502]


def _batch(trainer) -> list[TrainSample]:
    old = trainer.logprobs([PROMPT + GOOD, PROMPT + BAD], [len(PROMPT)] * 2)
    return [TrainSample(PROMPT, GOOD, old[0], +1.0), TrainSample(PROMPT, BAD, old[1], -1.0)]


@pytest.fixture(scope="module")
def bf16_trainer(tiny_model):
    return GRPOTrainer(tiny_model, TrainerConfig(learning_rate=5e-3, bf16=True))


def test_a_bf16_step_learns_and_keeps_float32_master_weights(bf16_trainer):
    trainer = bf16_trainer
    assert trainer.ds_config["torch_autocast"]["enabled"] and not trainer.ds_config["bf16"]["enabled"]
    before = trainer.logprobs([PROMPT + GOOD, PROMPT + BAD], [len(PROMPT)] * 2)
    for _ in range(3):
        metrics = trainer.step(_batch(trainer))
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    after = trainer.logprobs([PROMPT + GOOD, PROMPT + BAD], [len(PROMPT)] * 2)
    assert sum(after[0]) > sum(before[0]) + 0.1 and sum(after[1]) < sum(before[1]) - 0.1
    sft = trainer.step([TrainSample(PROMPT, GOOD, [0.0] * 3, 0.0)], objective="sft")  # the SFT objective
    assert torch.isfinite(torch.tensor(sft["loss"])) and sft["loss"] > 0
    # the module's ZeRO-3 partitions are the master weights; the optimizer's copies and AdamW's state
    params = list(trainer.engine.module.parameters())
    assert {p.ds_tensor.dtype for p in params} == {torch.float32}
    optimizer = trainer.engine.optimizer
    assert {t.dtype for t in optimizer.fp32_partitioned_groups_flat} == {torch.float32}
    state = [v for s in optimizer.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    assert state and {t.dtype for t in state} == {torch.float32}


def test_a_bf16_export_is_the_float32_master_and_loads(bf16_trainer, tmp_path):
    """The export holds the master weights exactly (DeepSpeed's own bf16 mode exported their
    bf16 rounding); the trainer's logprobs are bf16 numerics, close to the export's float32 ones."""
    from deepspeed.utils import safe_get_full_fp32_param
    from flywheel.policy.logprobs import sequence_logprobs
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    trainer = bf16_trainer
    trainer.step(_batch(trainer))
    out = trainer.export(tmp_path / "export")
    weights = load_file(str(Path(out) / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.float32}
    for name, param in trainer.engine.module.named_parameters():
        if name in weights:
            assert torch.equal(weights[name], safe_get_full_fp32_param(param)), name
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    seqs, lens = [[1, 2, 3, 4, 5, 6, 7, 8]], [2]
    exported = torch.tensor(sequence_logprobs(model, seqs, lens)[0])
    own = torch.tensor(trainer.logprobs(seqs, lens)[0])
    gap = (exported - own).abs().mean().item()
    # bf16 ran, and only rounding apart
    assert 0 < gap < sync_tolerance(FlywheelConfig(trainer={"bf16": True}))


def test_bf16_reference_starts_the_kl_at_zero(tiny_model):
    """The KL reference is scored in the policy's numerics: a float32 reference beside a bf16
    policy would show the rounding as KL before any step."""
    cfg = TrainerConfig(learning_rate=5e-3, kl_coef=0.1, bf16=True)
    trainer = GRPOTrainer(tiny_model, cfg)
    old = trainer.logprobs([PROMPT + GOOD], [len(PROMPT)])[0]
    first = trainer.step([TrainSample(PROMPT, GOOD, old, 1.0)])
    second = trainer.step([TrainSample(PROMPT, GOOD, old, 1.0)])
    assert first["kl"] == pytest.approx(0.0, abs=1e-9) and second["kl"] > 0  # fp32 reference: 1.1e-6


def test_a_cpu_without_bf16_units_trains_in_float32(monkeypatch):
    monkeypatch.setenv("FLYWHEEL_CPU_BF16", "0")
    cfg = TrainerConfig()
    ds = default_ds_config(cfg, uses_bf16(cfg))
    assert not ds["bf16"]["enabled"] and not ds["torch_autocast"]["enabled"]
    assert uses_bf16(cfg) == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def test_sync_tolerance_and_mismatch_correction_follow_both_dtypes():
    fp32 = FlywheelConfig(trainer={"bf16": False})
    assert sync_tolerance(fp32) == 1e-3 and not fp32.engine_mismatch
    for other in (FlywheelConfig(trainer={"bf16": True}), FlywheelConfig(engine={"dtype": "bfloat16"})):
        assert sync_tolerance(other) == 0.1 and other.engine_mismatch
    explicit = FlywheelConfig(trainer={"bf16": True, "correct_engine_mismatch": False})
    assert not explicit.engine_mismatch


@pytest.mark.integration
@pytest.mark.slow  # the CI set has two ranks (test_update_job) and bf16 steps (above); this is both at once
def test_two_bf16_ranks_make_the_same_update_as_one(tiny_model, tmp_path):
    """bf16 across ZeRO-3 ranks (torchrun, gloo): weights gathered and gradients reduced in
    float32 (no lower-precision modules), so two ranks export float32 weights and the same
    update as one, to bf16 rounding of the step."""
    from safetensors.torch import load_file

    from tests.test_update_job import commit_cycle, run_job

    lake = commit_cycle(tiny_model, tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  learning_rate: 0.001\n  bf16: true\n")
    run_job(1, lake, tiny_model, str(tmp_path / "one"), str(config))
    out2 = run_job(2, lake, tiny_model, str(tmp_path / "two"), str(config))
    assert '"world_size": 2' in out2
    one, two = (
        load_file(tmp_path / "one" / "model.safetensors"),
        load_file(tmp_path / "two" / "model.safetensors"),
    )
    base = load_file(f"{tiny_model}/model.safetensors")
    assert {t.dtype for t in two.values()} == {torch.float32}
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(one[key], base[key])
    for name in one:  # Adam normalises each step to ~lr: compare against the step size
        step = (one[name] - base[name]).abs().max()
        assert (one[name] - two[name]).abs().max() <= 0.1 * step + 1e-7, name


def test_the_cpu_default_follows_its_bf16_units(monkeypatch):
    """`trainer.bf16` empty: bf16 on a CPU whose flags list AMX or AVX512-BF16 (no GPU here),
    float32 when FLYWHEEL_CPU_BF16=0 (as the test suite sets it); an explicit value wins."""
    from flywheel.policy.trainer import cpu_has_bf16_units

    monkeypatch.delenv("FLYWHEEL_CPU_BF16", raising=False)
    info = Path("/proc/cpuinfo")
    flags = set(info.read_text().split()) if info.exists() else set()
    has_units = bool(flags & {"amx_bf16", "avx512_bf16"})
    assert cpu_has_bf16_units() == has_units
    assert uses_bf16(TrainerConfig()) == (has_units and not torch.cuda.is_available())
    monkeypatch.setenv("FLYWHEEL_CPU_BF16", "0")
    assert not cpu_has_bf16_units() and not uses_bf16(TrainerConfig())
    assert uses_bf16(TrainerConfig(bf16=True)) and not uses_bf16(TrainerConfig(bf16=False))
