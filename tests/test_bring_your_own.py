"""The user's world in: the example plug-in package pip-installed and found through its
entry point, a HumanEval-format task file, a reasoning-gym domain (by glob) and a reward
function, trained on together by the real flywheel (a tiny random-weight model with the
real tokenizer, vLLM, bubblewrap, DeepSpeed ZeRO-3, a local lake), and `flywheel domains`
listing what it found."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from flywheel.config import FlywheelConfig

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "flywheel-reverse-domain"
FUNCTIONS = ROOT / "examples" / "tasks" / "functions.jsonl"


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The example package, installed by pip (into a dir of its own put on sys.path, so the
    test's venv is left as it was)."""
    from flywheel.environments import registry

    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("src") / "pkg"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(build)], check=True)  # pip builds in place: keep the tree clean
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(build)], check=True)  # fmt: skip
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    registry.resolve.cache_clear()
    try:
        yield target
    finally:
        sys.path.remove(str(target))
        registry.resolve.cache_clear()


def test_the_entry_point_is_found_and_listed(plugin):
    from typer.testing import CliRunner

    from flywheel.cli import app

    res = CliRunner().invoke(app, ["domains", "--set", f"sampler.domains=[reverse,file:{FUNCTIONS}]"],
                             terminal_width=250)  # fmt: skip
    assert res.exit_code == 0, res.output
    row = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.strip()}
    assert "check" in row["reverse"] and "plug-in flywheel_reverse:ReverseWords" in row["reverse"], res.output
    assert "sandbox" in row[f"file:{FUNCTIONS}"] and "24 rows" in row[f"file:{FUNCTIONS}"], res.output
    assert "episode" in row["repair"] and "built in" in row["code"], res.output


@pytest.fixture(scope="module")
def run(plugin, tiny_model, prefect_server, tmp_path_factory):
    from flywheel.flows.flywheel import flywheel

    cfg = FlywheelConfig(
        run_id="byo", runs_dir=str(tmp_path_factory.mktemp("runs")), cycles=2, seed=5, model={"path": tiny_model},
        engine={"max_model_len": 1024}, sampler={"tasks_per_cycle": 6, "levels": [1],
                                                   "domains": ["reverse", f"file:{FUNCTIONS}", "rg/basic_arith*"]},
        generation={"k": 2, "max_tokens": 24}, replay={"enabled": False},
        reward={"functions": [{"name": "reverse_rewards:brevity", "weight": 0.5}]},
        trainer={"drop_zero_variance_groups": False, "learning_rate": 1e-2, "weight_decay": 0.5},
        eval={"before_and_after": False},
    )  # fmt: skip
    result = flywheel(cfg)
    from flywheel.storage.lake import Lake

    return cfg, result, Lake(cfg.lake_uri)


def test_plugin_file_and_reward_function_trained_on(run):
    cfg, result, lake = run
    assert [c.cycle for c in result.cycles] == [0, 1] and [c.policy_version for c in result.cycles] == [1, 2]
    rows = lake.trajectories("byo").to_pylist()
    assert {r["domain"] for r in rows} == {"reverse", f"file:{FUNCTIONS}", "rg/basic_arithmetic"}
    assert len(rows) == 2 * 6 * 2
    for r in rows:
        names = [c["name"] for c in r["reward_components"]]
        assert names == ["verifier", "reverse_rewards:brevity"], r["reward_components"]
        brevity = r["reward_components"][1]
        assert brevity["error"] == "" and 0.0 <= brevity["value"] <= 1.0
        verifier = r["reward_components"][0]["value"]
        assert r["reward"] == pytest.approx(verifier + 0.5 * brevity["value"])  # reward.verifier_weight 1
    code = [r for r in rows if r["domain"].startswith("file:")]
    assert all(r["verifier_version"] == f"file:{FUNCTIONS}-1" for r in code)
    assert {r["verdict"] for r in code} <= {"fail", "no_code", "timeout", "suspected_hack", "pass"}
    assert all(r["split"] == "train" for r in rows)
    rg = [r for r in rows if r["domain"] == "rg/basic_arithmetic"]  # scored in the sandbox by reasoning-gym
    assert {r["verdict"] for r in rg} <= {"fail", "no_code", "pass"} and not any(r["error"].startswith("rg scorer") for r in rg)
