"""SFT cold start: demonstrations from a JSONL file (malformed rows quarantined) make
the demonstrated answers likelier, and the result becomes the run's next policy."""

import json

import pytest

from flywheel.config import FlywheelConfig

pytestmark = pytest.mark.integration


def test_sft_from_jsonl(tiny_model, tmp_path, prefect_server):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flywheel.flows.sft import demonstrations_from_file, sft
    from flywheel.policy.logprobs import sequence_logprobs

    data = tmp_path / "demos.jsonl"
    good = [{"messages": [{"role": "user", "content": f"Say {w}."}, {"role": "assistant", "content": f"{w} {w} {w}"}]}
            for w in ("red", "green", "blue", "gold")]  # fmt: skip
    bad = [{"messages": [{"role": "user", "content": "no answer"}]}, {"prompt": "wrong shape"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in good + bad) + "{not json\n")
    tok = AutoTokenizer.from_pretrained(tiny_model)
    examples, quarantined = demonstrations_from_file(str(data), tok)
    assert len(examples) == 4 and len(quarantined) == 3
    assert tok.decode(examples[0][1]).startswith("red red red")

    def demo_logprob(model_dir):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        return sum(
            sum(lp)
            for lp in sequence_logprobs(
                model, [p + c for p, c, _ in examples], [len(p) for p, _, _ in examples]
            )
        )

    cfg = FlywheelConfig(run_id="sft", runs_dir=str(tmp_path / "runs"), model={"path": tiny_model})
    result = sft(cfg, data_path=str(data), epochs=4, batch_size=2, learning_rate=3e-3)
    assert result["examples"] == 4 and result["quarantined"] == 3 and result["policy_version"] == 1
    assert result["last_loss"] < result["first_loss"]
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    policies = PolicyStore(Lake(cfg.lake_uri), "sft", cfg.run_dir / "policy-cache")
    assert policies.version == 1
    assert demo_logprob(policies.hf_dir()) > demo_logprob(tiny_model) + 1.0
    assert len((cfg.run_dir / "quarantine" / "sft-demos.jsonl").read_text().splitlines()) == 3


def test_reference_demonstrations_cover_the_sampled_domains(tiny_model):
    """`references=N`: N train tasks per domain and level with a reference reply, from
    every domain, encoded as prompt plus answer; a multi-turn
    reference (repair) played in a real workspace, its tool output masked (NaN)."""
    import math

    from transformers import AutoTokenizer

    from flywheel.environments.sandbox import make_sandbox
    from flywheel.flows.sft import demonstrations_from_references

    tok = AutoTokenizer.from_pretrained(tiny_model)
    cfg = FlywheelConfig(
        sampler={"domains": ["code", "math", "data", "repair"], "levels": [1, 2]},
        engine={"max_model_len": 4096},
    )  # room for whole repair episodes
    box = make_sandbox(cfg.sandbox)
    try:
        demos = demonstrations_from_references(cfg, tok, box, per_level=3)
    finally:
        box.close()
    assert len(demos) == 4 * 2 * 3  # code, math, data and repair, two levels, three each
    texts = [tok.decode(c) for _, c, _ in demos]
    assert sum("Answer: " in t for t in texts) == 6 and sum("def transform" in t for t in texts) == 6
    assert sum(t.startswith("```python\ndef ") and "def transform" not in t for t in texts) == 6  # code's
    assert all("Answer:" not in tok.decode(p) or "Answer: <number>" in tok.decode(p) for p, _, _ in demos)
    episodes = [(c, m) for _, c, m in demos if "<tool_call>" in tok.decode(c)]
    assert len(episodes) == 6 and all(len(c) == len(m) for c, m in episodes)
    for c, mask in episodes:  # the model's calls are learnt, the tools' replies are not
        learnt = tok.decode([t for t, lp in zip(c, mask) if not math.isnan(lp)])
        skipped = tok.decode([t for t, lp in zip(c, mask) if math.isnan(lp)])
        assert "write_file" in learnt and "submit" in learnt and "def " in skipped


@pytest.mark.slow  # ~90 s: test_lora_run makes the same cold start (v1 pinned, cycle 0 sampled from it, no second one)
def test_cold_start_runs_once_before_the_first_cycle(tiny_model, tmp_path, prefect_server):
    """`cold_start.references`: a new run is fine-tuned on reference replies (policy v1)
    before cycle 0, whose samples then come from v1; resuming never repeats it."""
    from flywheel.flows.flywheel import flywheel
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    cfg = FlywheelConfig(
        run_id="cold", runs_dir=str(tmp_path / "runs"), cycles=1, model={"path": tiny_model},
        sampler={"domains": ["math"], "levels": [1], "tasks_per_cycle": 2},
        generation={"k": 2, "max_tokens": 8},
        trainer={"drop_zero_variance_groups": False},
        cold_start={"references": 2, "epochs": 1, "batch_size": 2, "learning_rate": 1e-3},
        eval={"before_and_after": False},
    )  # fmt: skip
    first = flywheel(cfg)
    lake = Lake(cfg.lake_uri)
    versions = PolicyStore(lake, "cold", cfg.run_dir / "policy-cache").manifest["versions"]
    assert versions["1"]["cycle"] == -1 and versions["2"]["cycle"] == 0  # SFT, then cycle 0's update
    assert set(lake.trajectories("cold").column("policy_version").to_pylist()) == {1}
    again = flywheel(cfg.model_copy(update={"cycles": 2}))
    assert [s.cycle for s in first.cycles] == [0]
    assert [s.cycle for s in again.cycles] == [0, 1]  # 0 found done
    manifest = PolicyStore(lake, "cold", cfg.run_dir / "policy-cache").manifest
    assert manifest["version"] == 3 and manifest["versions"]["3"]["cycle"] == 1  # no second SFT
    assert manifest["pinned"] == {"sft": 1}  # the SFT-only policy is kept
    assert manifest["versions"]["1"].get("hf")
