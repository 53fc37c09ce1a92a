"""The agentic metrics as the reports show them (reports/agentic_report.py): the evaluation
rows with their intervals and ks over hand-made episodes, and one real evaluation of `repair`
with the tiny model showing the metrics in the evaluation's rows, frames, markdown, a Prefect
artifact, the tracker and `flywheel report`. The views themselves are tested in
test_agentic_metrics.py."""

import math

import pytest

from flywheel.storage import agentic, evals
from flywheel.storage.lake import Lake

from .agentic_episodes import CASES, SUBMIT, episode, step


def test_the_report_rows_put_intervals_and_ks_on_the_views(tmp_path):
    from flywheel.reports.agentic_report import evaluation_rows, tracker_values
    from flywheel.reports.stats import wilson

    lake = Lake(str(tmp_path / "lake"))
    lake.write_evaluation("r", 0, "greedy", CASES)
    sampled = [episode(t, i, verdict="pass" if i < c else "fail", steps=[step(SUBMIT)])
               for t, c in (("a", 4), ("b", 1), ("c", 0)) for i in range(4)]  # fmt: skip
    lake.write_evaluation("r", 0, "sampled", sampled)
    rows = {r["mode"]: r for r in evaluation_rows(evals.connect(lake, "r"), 0)}
    greedy, many = rows["greedy"], rows["sampled"]
    assert (greedy["completion"], greedy["ci_low"], greedy["ci_high"]) == (
        0.2,
        *(round(x, 4) for x in wilson(2, 10)),
    )
    assert greedy["pass@1"] == greedy["pass^1"] == 0.2 and greedy["pass@4"] is None  # n = 1
    assert (many["pass@1"], many["pass@2"], many["pass@4"]) == (
        0.4167,
        0.5,
        0.6667,
    )  # (1 + 1/4 + 0)/3, (1 + 1/2 + 0)/3, (1 + 1 + 0)/3
    assert (many["pass^2"], many["pass^4"]) == (0.3333, 0.3333)
    assert greedy["sandbox_error"] == 2 and many["tests_failed"] == 7
    values = tracker_values([greedy, many])
    assert values["eval/agentic/sampled/repair/l1/pass_hat_4"] == pytest.approx(0.3333)
    assert not any(math.isnan(v) for v in values.values())


@pytest.mark.integration
def test_a_real_evaluation_of_repair_shows_the_agentic_metrics(tiny_model, tmp_path, prefect_server):
    """The tiny model (random weights) plays repair episodes in bwrap workspaces, greedy and
    sampled (k=2): the metrics reach the result's rows and frames, the markdown report, a
    Prefect table artifact, the tracker and `flywheel report`."""
    import httpx
    from mlflow.tracking import MlflowClient
    from prefect.settings import PREFECT_API_URL
    from typer.testing import CliRunner

    from flywheel.cli import app
    from flywheel.config import FlywheelConfig
    from flywheel.flows.evaluate import evaluate
    from flywheel.reports.tracking import Tracker

    cfg = FlywheelConfig(
        run_id="agentic", runs_dir=str(tmp_path / "runs"), seed=1, model={"path": tiny_model},
        engine={"backend": "hf", "max_model_len": 1024}, sandbox={"concurrency": 2},
        sampler={"domains": ["repair"], "levels": [1]}, generation={"max_tokens": 16, "max_turns": 2},
        eval={"suites": [], "tasks_per_level": 2, "k": 2}, tracking={"backends": ["mlflow"]},
    )  # fmt: skip
    result = evaluate(cfg)
    rows = {r["mode"]: r for r in result.agentic}
    assert set(rows) == {"greedy", "sampled"}
    greedy, sampled = rows["greedy"], rows["sampled"]
    assert (greedy["episodes"], greedy["tasks"], sampled["episodes"], sampled["tasks"]) == (2, 2, 4, 2)
    for r in rows.values():
        assert (
            r["domain"] == "repair"
            and r["level"] == 1
            and 0 <= r["ci_low"] <= r["completion"] <= r["ci_high"]
        )
        assert sum(r[f] for f in agentic.FAILURES) == r["episodes"] - r["completed"]
        assert (
            r["wall_s_per_episode"] > 0
            and 0 <= r["call_valid"] <= r["call_names_tool"] <= r["call_parses"] <= 1
        )
        assert r["call_accuracy"] is None  # repair keeps no expected calls
    assert sampled["pass@1"] is not None and sampled["pass@2"] >= sampled["pass@1"] >= sampled["pass^2"]
    frame = result.agentic_frame()
    assert {"completion", "ci_low", "pass@2", "pass^2", "turns_per_solved", "tokens_per_solved", "call_valid",
            "wall_s_per_episode", "out_of_turns", "invalid_calls", "tests_failed"} <= set(frame.columns)  # fmt: skip
    text = (cfg.with_run_id().run_dir / "eval-v0.md").read_text()
    assert "Agentic metrics" in text and "Why episodes failed" in text and "pass^2" in text
    artifacts = httpx.post(f"{PREFECT_API_URL.value()}/artifacts/filter", json={}, timeout=10).json()
    mine = [a for a in artifacts if a["key"] == "eval-agentic-agentic"]
    assert mine and mine[0]["type"] == "table" and "pass^2" in mine[0]["data"]

    tracker = Tracker.from_config(cfg)
    tracker.evaluation(result)
    tracker.close()
    client = MlflowClient()
    [mrun] = client.search_runs([client.get_experiment_by_name("flywheel").experiment_id],
                                "tags.`flywheel.run_id` = 'agentic'")  # fmt: skip
    logged = mrun.data.metrics
    assert logged["eval/agentic/sampled/repair/l1/pass_hat_2"] == pytest.approx(sampled["pass^2"])
    assert "eval/agentic/greedy/repair/l1/completion" in logged

    out = CliRunner().invoke(
        app, ["report", "--run-id", "agentic", "--runs-dir", cfg.runs_dir], terminal_width=250
    )
    assert out.exit_code == 0, out.output
    assert "Agentic metrics of the evaluations" in out.output and "pass^2" in out.output
