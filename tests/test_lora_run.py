"""LoRA through the whole loop on real parts (vLLM, DeepSpeed ZeRO-3, bubblewrap, a
Prefect server): an SFT cold start with LoRA, then a GRPO cycle whose merged weights the
engine loads (the sync probe agrees), an export holding the adapter, and a resumed
trainer (built from the base model, its checkpoint loaded) equal to the export: the
checkpoint brings back the SFT policy's frozen weights, not only the adapter. With a KL
penalty, its reference is the SFT policy, before and after the resume."""

import json
from pathlib import Path

import pytest

from flywheel.config import FlywheelConfig

pytestmark = pytest.mark.integration

LORA = {"r": 4, "alpha": 8}


def test_sft_then_grpo_with_lora_then_resume(tiny_model, tmp_path, prefect_server):
    from transformers import AutoModelForCausalLM

    from flywheel.flows.flywheel import _cold_start, flywheel
    from flywheel.run.runtime import Runtime
    from flywheel.policy.logprobs import sequence_logprobs
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    cfg = FlywheelConfig(
        run_id="lora", runs_dir=str(tmp_path / "runs"), cycles=1, seed=1,
        model={"path": tiny_model},
        engine={"max_model_len": 1024},
        sampler={"tasks_per_cycle": 2, "levels": [1], "domains": ["math"]},
        generation={"k": 2, "max_tokens": 16},
        trainer={"drop_zero_variance_groups": False, "learning_rate": 1e-2, "weight_decay": 0.5, "lora": LORA,
                 "kl_coef": 0.1},
        cold_start={"references": 2, "epochs": 2, "batch_size": 2, "learning_rate": 1e-2},
        eval={"before_and_after": False},
        tracking={"backends": []},
    )  # fmt: skip
    result = flywheel(cfg)
    update = result.cycles[0].update
    assert update["policy_version"] == 2 and update["sync_max_logprob_diff"] < 1e-4
    # the KL reference is the SFT policy cycle 0 trained from, not the base it left behind
    assert update["kl"] == pytest.approx(0.0, abs=1e-6)
    lake = Lake(cfg.lake_uri)
    versions = PolicyStore(lake, "lora", cfg.run_dir / "policy-cache").manifest["versions"]
    assert versions["1"]["cycle"] == -1 and versions["2"]["cycle"] == 0  # SFT, then GRPO
    assert set(lake.trajectories("lora").column("policy_version").to_pylist()) == {1}  # cycle 0 sampled v1
    _cold_start(cfg)  # what a resumed run does first: nothing now, the run is not new
    manifest = PolicyStore(lake, "lora", cfg.run_dir / "policy-cache").manifest
    assert manifest["version"] == 2  # no second SFT
    assert manifest["pinned"]["sft"] == 1  # the SFT-only policy is kept
    assert manifest["versions"]["1"].get("hf")

    rt = Runtime(cfg)
    try:
        v2 = rt.policies.hf_dir(2)
        adapter = json.loads((Path(v2) / "adapter" / "adapter_config.json").read_text())
        assert adapter["r"] == 4 and adapter["peft_type"] == "LORA"
        assert rt.kl_reference() == rt.policies.hf_dir(1)  # pinned "sft", as the run resumes
        trainer = rt.get_trainer(start_engine=False)  # base model + v2's checkpoint
        seqs, lens = [[1, 200, 300, 400, 500, 600]], [2]
        exported = AutoModelForCausalLM.from_pretrained(v2)
        assert trainer.logprobs(seqs, lens)[0] == pytest.approx(
            sequence_logprobs(exported, seqs, lens)[0], abs=1e-5
        )
    finally:
        rt.close()
