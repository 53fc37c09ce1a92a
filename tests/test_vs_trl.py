"""bench/vs_trl.py's bookkeeping, without training anything: TRL's knobs come from the
flywheel's config, both sides' policies are picked by one rule, and the report's time to
TRL's final reward and ratio."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("vs_trl", Path(__file__).parents[1] / "bench" / "vs_trl.py")
vs_trl = sys.modules.setdefault("vs_trl", importlib.util.module_from_spec(spec))  # benches are scripts
spec.loader.exec_module(vs_trl)


def test_trl_gets_the_flywheel_recipe_knobs(tmp_path):
    pytest.importorskip("trl")
    bench = vs_trl.BenchConfig(domains=["code"], overrides=["trainer.learning_rate=3e-5"])
    cfg = vs_trl.flywheel_config(bench, "x", str(tmp_path))
    assert (
        cfg.sampler.domains == ["code"] and cfg.sampler.levels == [1] and cfg.store.keep_policy_exports > 1000
    )
    args = vs_trl.trl_args(cfg, str(tmp_path / "trl"))
    assert (args.learning_rate, args.epsilon, args.epsilon_high, args.beta) == (3e-5, 0.2, 0.28, 0.0)
    assert (
        args.num_generations == cfg.generation.k == 8 and args.max_completion_length == cfg.generation.max_tokens
    )
    assert (
        args.generation_batch_size == cfg.generation.k * cfg.sampler.tasks_per_cycle
    )  # one step per cycle's worth
    assert (args.lr_scheduler_type, args.loss_type, args.num_iterations, args.shuffle_dataset) == (
        "constant", "dapo", 1, False,
    )  # fmt: skip


def test_both_sides_are_picked_on_one_grid_and_the_ratio_is_reported(tmp_path):
    bench = vs_trl.BenchConfig(minutes=10, eval_points=2)
    assert bench.grid() == [300.0, 600.0]
    versions = [{"label": f"v{i}", "t": t} for i, t in enumerate([100, 250, 320, 500, 640, 700])]
    assert [p["label"] for p in vs_trl.on_grid(versions, bench.grid())] == ["v2", "v4", "v5"]
    base = {"side": "base", "label": "base", "t": 0.0, "reward": 0.1, "eval_tasks": 8}
    evaluated = [
        base,
        {"side": "trl", "round": 0, "label": "step 3", "t": 310.0, "reward": 0.3},
        {"side": "trl", "round": 0, "label": "step 6", "t": 605.0, "reward": 0.25},
        {"side": "flywheel", "round": 0, "label": "v2", "t": 90.0, "reward": 0.26},
        {"side": "flywheel", "round": 0, "label": "v4", "t": 300.0, "reward": 0.4},
    ]
    [row] = vs_trl.summarise(bench, evaluated)
    # TRL's final is 0.25, which it first reached at 310 s; the flywheel at 90 s
    assert (row["trl_s"], row["flywheel_s"], row["ratio"], row["target_met"]) == (310.0, 90.0, 0.29, True)
    assert "ratio 0.29 (target <= 0.33: met)" in vs_trl.table(bench, evaluated, [row])
    vs_trl.plot(bench, evaluated, [row], tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    flat = [base, {**evaluated[1], "reward": 0.1}, evaluated[3]]
    assert "did not improve" in vs_trl.summarise(bench, flat)[0]["note"]
    json.dumps(row)


def test_trl_gets_its_best_learning_rate_and_each_gain_an_interval(tmp_path):
    """A sweep: TRL runs once per learning rate, its best final policy is the one compared
    (the flywheel keeps the recipe's rate), and each final gain is paired over the same
    tasks, with "no resolvable difference" when the interval spans 0."""
    bench = vs_trl.BenchConfig(minutes=10, eval_points=1, trl_lrs=[1e-5, 5e-5])
    assert bench.trl_arms() == [1e-5, 5e-5] and vs_trl.BenchConfig().trl_arms() == [None]
    swept = vs_trl.flywheel_config(vs_trl.with_trl_lr(bench, 5e-5), "x", str(tmp_path))
    assert swept.trainer.learning_rate == 5e-5
    assert vs_trl.flywheel_config(bench, "x", str(tmp_path)).trainer.learning_rate != 5e-5
    n = 40
    base = {
        "side": "base",
        "label": "base",
        "t": 0.0,
        "reward": 0.2,
        "eval_tasks": n,
        "rewards": [0] * 32 + [1] * 8,
    }
    trl_low = {"side": "trl", "round": 0, "lr": 1e-5, "label": "step 4", "t": 600.0, "reward": 0.225,
               "rewards": [0] * 31 + [1] * 9}  # fmt: skip
    trl_high = {**trl_low, "lr": 5e-5, "reward": 0.15, "rewards": [0] * 34 + [1] * 6}
    fly = {
        "side": "flywheel",
        "round": 0,
        "label": "v5",
        "t": 590.0,
        "reward": 0.7,
        "rewards": [1] * 28 + [0] * 12,
    }
    [row] = vs_trl.summarise(bench, [base, trl_low, trl_high, fly])
    assert row["trl_best_lr"] == 1e-5 and row["trl_finals"] == {"1e-05": 0.225, "5e-05": 0.15}
    assert row["trl_gain"]["n"] == n and not row["trl_gain"]["resolvable"]
    assert row["flywheel_gain"]["resolvable"] and row["flywheel_over_trl"]["ci_low"] > 0
    text = vs_trl.table(bench, [base, trl_low, trl_high, fly], [row])
    assert "TRL's best over the base model: +2.5 points" in text and "no resolvable difference" in text
    vs_trl.plot(bench, [base, trl_low, trl_high, fly], [row], tmp_path / "c.png")
    json.dumps(row)


def test_a_reused_work_dir_must_match_the_training_flags(tmp_path):
    bench = vs_trl.BenchConfig(work_dir=str(tmp_path))
    vs_trl.prepare_work_dir(bench)
    vs_trl.prepare_work_dir(vs_trl.BenchConfig(work_dir=str(tmp_path), eval_per_level=4))  # evaluation only
    with pytest.raises(SystemExit, match="minutes"):
        vs_trl.prepare_work_dir(vs_trl.BenchConfig(work_dir=str(tmp_path), minutes=5))


@pytest.mark.integration
# ~130 s: a bench's smoke test. The flywheel side's cycle is test_cycle's path; its stop on
# wall time (an endless generator of cycles), test_cycle_loop's.
@pytest.mark.slow
def test_the_whole_bench_runs_on_a_tiny_model(tiny_model, tmp_path):
    """Both sides (TRL, and the flywheel with vLLM, DeepSpeed and bubblewrap), the shared
    evaluator and the report, on a random-weight model for a budget of seconds: each
    side runs a step or cycle or two (how many depends on the machine's speed) and stops."""
    pytest.importorskip("trl")
    import subprocess

    out = tmp_path / "out"
    cmd = [
        sys.executable, str(Path(vs_trl.__file__)), "--model", tiny_model, "--minutes", "0.05",
        "--eval-per-level", "1", "--eval-points", "1", "--order", "flywheel-first", "--out", str(out),
        "--set", "sampler.tasks_per_cycle=2", "--set", "generation.k=2", "--set", "generation.max_tokens=8",
        # A random model fails everything, so every advantage is 0: train on the equal rewards
        # anyway, with weight decay (both sides), so that each side's weights really change.
        "--set", "trainer.drop_zero_variance_groups=false", "--set", "trainer.weight_decay=0.5",
        "--set", "trainer.learning_rate=1e-2", "--trl-lrs", "1e-2,2e-2",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=1200)
    report = json.loads((out / "points.json").read_text())
    runs = {r["side"]: r for r in report["runs"]}  # the last TRL arm
    assert [(r["side"], r.get("lr")) for r in report["runs"]] == [("flywheel", None), ("trl", 1e-2), ("trl", 2e-2)]
    assert (
        runs["trl"]["steps"] and runs["trl"]["same_prompt_ids"] and runs["trl"]["steps"][0]["rollout_s"] > 0
    )
    assert runs["flywheel"]["steps"] and runs["flywheel"]["all_versions"] == len(runs["flywheel"]["steps"])
    evaluated = report["evaluation"]["points"]
    assert [p["side"] for p in evaluated] == ["base", "flywheel", "trl", "trl"] and len(evaluated[0]["rewards"]) == 2
    assert evaluated[1]["label"].startswith("v") and evaluated[2]["label"].startswith("step ")
    assert len({p["probe_logprob"] for p in evaluated}) == 4  # each policy really was loaded
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG" and "Round 0" in (out / "table.md").read_text()
