from pathlib import Path

import pytest

from flywheel.config import FlywheelConfig, apply_overrides


def test_defaults_are_the_embedded_cpu_default():
    cfg = FlywheelConfig()
    assert cfg.engine.backend == "vllm" and cfg.sandbox.backend == "bwrap"
    assert cfg.model.path is None and cfg.store.uri is None


def test_overrides_parse_yaml_values():
    cfg = apply_overrides(
        FlywheelConfig(), ["trainer.learning_rate=1e-5", "sampler.levels=[1, 2]", "cycles=3"]
    )
    assert cfg.trainer.learning_rate == 1e-5 and cfg.sampler.levels == [1, 2] and cfg.cycles == 3


@pytest.mark.parametrize("bad", ["trainer.nope=1", "nosection.x=1", "cycles", "cycles=-1"])
def test_bad_overrides_name_the_problem(bad):
    with pytest.raises(ValueError):
        apply_overrides(FlywheelConfig(), [bad])


def test_yaml_roundtrip(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("cycles: 5\ngeneration:\n  k: 5\n")
    cfg = FlywheelConfig.from_yaml(p)
    assert cfg.cycles == 5 and cfg.generation.k == 5


def test_a_misspelt_key_is_an_error_naming_the_file_and_the_key(tmp_path):
    """Before, pydantic's default dropped unknown keys: this recipe ran at the default rate."""
    p = tmp_path / "recipe.yaml"
    p.write_text("trainer:\n  learnig_rate: 1.0e-6\n")
    with pytest.raises(ValueError, match=r"recipe\.yaml.*\n?.*trainer\.learnig_rate"):
        FlywheelConfig.from_yaml(p)
    with pytest.raises(ValueError, match="tracking.nope"):
        FlywheelConfig.model_validate({"tracking": {"nope": 1}})


def test_the_old_section_name_sampling_still_loads_with_a_warning(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("sampling:\n  k: 5\n")
    with pytest.warns(FutureWarning, match="`sampling` is now `generation`"):
        assert FlywheelConfig.from_yaml(p).generation.k == 5
    with pytest.warns(FutureWarning):
        assert apply_overrides(FlywheelConfig(), ["sampling.k=3"]).generation.k == 3
    with pytest.raises(ValueError, match="keep `generation`"):
        FlywheelConfig.model_validate({"sampling": {"k": 2}, "generation": {"k": 3}})


def test_run_id_is_generated_once():
    cfg = FlywheelConfig().with_run_id()
    assert cfg.run_id.startswith("run-") and cfg.with_run_id().run_id == cfg.run_id
    with pytest.raises(ValueError):
        FlywheelConfig().run_dir


def test_process_reward_weights_reach_the_multi_turn_score():
    from flywheel.environments.toolkit.agentic import RewardWeights, combine

    cfg = FlywheelConfig.model_validate({"reward": {"valid_weight": 0.0, "progress_weight": 0.5}})
    r = cfg.reward
    w = RewardWeights(r.outcome_weight, r.valid_weight, r.progress_weight, r.recovery_weight)
    reward, process = combine(0.0, {"valid": 1.0, "progress": 1.0, "recovery": 0.0}, w)
    assert process == 0.5 and reward == 0.5 / (1.0 + 0.0 + 0.5 + 0.1)


def test_bf16_rollouts_turn_the_engine_mismatch_correction_on():
    from flywheel.config import FlywheelConfig

    assert not FlywheelConfig().engine_mismatch
    assert FlywheelConfig(engine={"dtype": "bfloat16"}).engine_mismatch
    off = FlywheelConfig(engine={"dtype": "bfloat16"}, trainer={"correct_engine_mismatch": False})
    assert not off.engine_mismatch


def test_an_override_turns_an_optional_section_on_with_its_defaults():
    cfg = apply_overrides(FlywheelConfig(), ["trainer.lora.r=8"])
    assert cfg.trainer.lora.r == 8 and "q_proj" in cfg.trainer.lora.target_modules
    with pytest.raises(ValueError, match="unknown key 'rank'"):
        apply_overrides(FlywheelConfig(), ["trainer.lora.rank=8"])


def test_show_config_names_a_bad_key_instead_of_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from flywheel.cli import app

    p = tmp_path / "recipe.yaml"
    p.write_text("trainer:\n  learnig_rate: 1.0e-6\n")
    res = CliRunner().invoke(app, ["show-config", "--config", str(p)])
    assert res.exit_code == 2 and "trainer.learnig_rate" in res.output and "Traceback" not in res.output
    ok = CliRunner().invoke(app, ["show-config"])
    assert ok.exit_code == 0 and "generation:" in ok.output and "sampling:" not in ok.output


@pytest.mark.parametrize(
    "recipe", sorted(p.name for p in (Path(__file__).parents[1] / "recipes").glob("*.yaml"))
)
def test_every_shipped_recipe_loads_and_shows_the_command_that_runs_it(recipe):
    """A recipe is read only when someone runs it, often an hour in: a key renamed since it was
    written would fail there, not here."""
    path = Path(__file__).parents[1] / "recipes" / recipe
    FlywheelConfig.from_yaml(path)  # raises on a key the config does not have, naming file and key
    assert f"--config recipes/{recipe}" in path.read_text(), f"{recipe}: its comment shows no command"
