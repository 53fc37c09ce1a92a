"""The data flywheel proper, end to end on CPU with real parts: a generated production log of
one workload (JSON extraction, a share answered wrongly) is ingested, turned into tasks,
trained on for two cycles (its logged failures replayed, a real vLLM server as the judge),
gated and deployed into that running vLLM server, which then answers with the new weights.
And the gate's refusals: a resolvable regression, and a server that is down."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from flywheel.config import FlywheelConfig
from flywheel.storage.lake import Lake
from tests.test_openai_engine import transformers_logprobs

pytestmark = pytest.mark.integration


def production_log(path, n: int = 40, wrong_share: float = 0.3, seed: int = 7) -> int:
    """n extraction requests as the Data Flywheel Blueprint logs them; a share answered
    wrongly (rated down, with the corrected answer); the rest rated up."""
    rng, wrong = random.Random(seed), 0
    with open(path, "w") as f:
        for i in range(n):
            total, vendor = rng.randint(100, 9999), rng.choice(["Acme", "Globex", "Initech", "Umbrella"])
            bad = rng.random() < wrong_share
            wrong += bad
            answer = {"total": total, "vendor": vendor}
            logged = {"total": total + 10, "vendor": vendor} if bad else answer
            f.write(json.dumps({
                "timestamp": 1764633600 + i, "workload_id": "invoices", "client_id": f"c{i % 3}",
                "request": {"model": "prod", "messages": [
                    {"role": "system", "content": 'Reply with JSON {"total": <number>, "vendor": <name>}.'},
                    {"role": "user", "content": f"Invoice {i} from {vendor} Ltd. Amount due: {total} EUR. "
                                                f"Contact billing@{vendor.lower()}.com."}]},
                "response": {"choices": [{"message": {"role": "assistant", "content": json.dumps(logged)}}]},
                "feedback": {"rating": "down", "corrected_answer": answer} if bad else {"rating": "up"},
            }) + "\n")  # fmt: skip
    return wrong


def server_logprobs(url: str, seq: list[int], start: int) -> list[float]:
    body = {"prompt": seq, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
    plp = httpx.post(f"{url}/v1/completions", json=body, timeout=60).raise_for_status().json()["choices"][0]["prompt_logprobs"]
    return [plp[j][str(seq[j])]["logprob"] for j in range(start, len(seq))]


def test_production_log_to_deployed_policy(tiny_model, vllm_server, prefect_server, tmp_path):
    server = vllm_server
    from flywheel.flows.flywheel import flywheel
    from flywheel.flows.ingest import ingest
    from flywheel.production.deploy import deploy
    from flywheel.reports.workload_report import workload_rows
    from flywheel.storage.deployments import Deployments
    from flywheel.storage.policies import PolicyStore

    log = tmp_path / "prod.jsonl"
    wrong = production_log(log)
    cfg = FlywheelConfig(
        run_id="prod", runs_dir=str(tmp_path / "runs"), cycles=2, seed=1, model={"path": tiny_model},
        sampler={"domains": ["traces:invoices"], "levels": [1], "tasks_per_cycle": 4},
        workloads={"invoices": {"verifier": "json_fields"}},
        generation={"k": 2, "max_tokens": 24},
        trainer={"drop_zero_variance_groups": False, "learning_rate": 1e-2, "weight_decay": 0.5},
        # the tiny model as the judge, its replies constrained to a verdict object by the server
        reward={"judge": {"rubric": "Are total and vendor right?", "base_url": server.url, "max_retries": 0}},
        eval={"suites": [], "in_run_tasks_per_level": 4},
    )  # fmt: skip
    (report,) = ingest([str(log)], cfg, store=cfg.lake_uri)
    assert (report.records, report.new, report.quarantined) == (40, 40, 0) and report.redactions == {"email": 40}
    result = flywheel(cfg)
    lake = Lake(cfg.lake_uri)
    assert lake.committed_cycles("prod") == [0, 1] and len(result.evaluations) == 2

    trajs = lake.trajectories("prod").to_pylist()
    assert {t["domain"] for t in trajs} == {"traces:invoices"} and len(trajs) == 2 * 4 * 2
    judge = [c for t in trajs for c in t["reward_components"] if c["name"] == "judge"]
    assert len(judge) == len(trajs) and all(c["value"] in {n / 10 for n in range(11)} for c in judge)
    agrees = [c for t in trajs for c in t["reward_components"] if c["name"] == "judge_agrees"]
    assert len(agrees) == len(trajs)  # the verifier grades too: every judgement cross-checked
    cost = [json.loads(line) for line in (cfg.run_dir / "judge.jsonl").read_text().splitlines()]
    assert [c["label"] for c in cost] == ["eval-greedy", "train", "train", "eval-greedy"] and cost[0]["requests"] > 0
    env_failures = {t.task_id for t in lake.read_replay_queue("prod", 1) if t.domain == "traces:invoices"}
    replayed = {t["task_id"] for t in trajs if t["cycle"] == 1 and t["origin"] == "replay"}
    assert replayed and replayed <= env_failures  # logged failures came back through replay
    rows = {r["workload"]: r for r in workload_rows(cfg)}
    assert rows["invoices"]["traces"] == 40 and rows["invoices"]["heldout_pass@1"].startswith("0.000")
    assert rows["invoices"]["judge"].startswith("16 scored, 0 errors, disagrees ")
    tasks = rows["invoices"]["tasks"]
    assert rows["invoices"]["logged_failed"].startswith(f"{wrong / tasks:.3f}")

    policies = PolicyStore(lake, "prod", tmp_path / "cache")
    version = policies.version
    hf = policies.hf_dir(version)
    seq = list(range(5, 45))
    before = server_logprobs(server.url, seq, 10)
    gate = deploy(lake, "prod", version, hf, [server.url], cfg.engine)
    assert gate.passed and {r["group"] for r in gate.rows} >= {"held-out", "traces:invoices"}
    after = server_logprobs(server.url, seq, 10)
    (want,) = transformers_logprobs(hf, [seq], [10])
    assert max(abs(a - b) for a, b in zip(after, want)) < 1e-3  # the server holds the new weights
    assert max(abs(a - b) for a, b in zip(after, before)) > 1e-2
    assert Deployments(lake).serving() == ("prod", version)


def write_eval(lake, run: str, version: int, solved: list[int]) -> None:
    """A greedy evaluation of `version` on tasks t0.. (solved or not), as the evaluation flow writes it."""
    from flywheel.storage.synthetic import cycle_tables

    _, table = cycle_tables(run, 0, len(solved), k=1, task_pool=len(solved))
    rows = table.to_pylist()
    for i, (row, s) in enumerate(zip(rows, solved)):
        row.update(task_id=f"t{i}", domain="traces:invoices", level=1, split="eval", policy_version=version,
                   verdict="pass" if s else "fail", reward=float(s))  # fmt: skip
    lake._write_table(lake._path("evaluations", f"run={run}", f"policy=v{version}", "mode=greedy", "part-0.parquet"),
                      type(table).from_pylist(rows, schema=table.schema))  # fmt: skip
    lake.write_evaluation_groups(run, version, {"held-out": ["traces:invoices"]})


def test_the_gate_refuses_a_regression_and_a_server_that_is_down(tiny_model, tmp_path):
    from flywheel.config import EngineConfig
    from flywheel.production.deploy import DeployRefused, deploy
    from flywheel.policy.engines.openai_server import EngineUnavailable
    from flywheel.storage.deployments import Deployments
    from flywheel.storage.seaweed import free_port

    lake = Lake(str(tmp_path / "lake"))
    write_eval(lake, "r", 0, [1] * 24 + [0] * 6)
    write_eval(lake, "r", 1, [0] * 30)  # resolvably worse
    write_eval(lake, "r", 2, [1] * 24 + [0] * 6)  # the same
    down = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DeployRefused, match="resolvably worse than the serving policy on held-out, traces:invoices"):
        deploy(lake, "r", 1, tiny_model, [down], EngineConfig(max_retries=0))
    with pytest.raises(EngineUnavailable, match=down):
        deploy(lake, "r", 2, tiny_model, [down], EngineConfig(max_retries=0))
    decisions = [(d["version"], d["decision"]) for d in Deployments(lake).all()]
    assert decisions == [(1, "refused"), (2, "failed")] and Deployments(lake).serving() is None
    with pytest.raises(DeployRefused, match="no greedy evaluation of r v3"):
        deploy(lake, "r", 3, tiny_model, [down], EngineConfig(max_retries=0))
    # the CLI's dry run shows the gate and pushes nothing
    from typer.testing import CliRunner

    from flywheel.cli import app

    for version, code, said in (("1", 2, "gate: refuses: resolvably worse"), ("2", 0, "gate: passes")):
        out = CliRunner().invoke(app, ["deploy", "--run-id", "r", "--store", str(tmp_path / "lake"), "--to", down,
                                       "--version", version, "--dry-run"], env={"COLUMNS": "200"})  # fmt: skip
        assert out.exit_code == code and said in out.output, out.output
    assert len(Deployments(lake).all()) == 3  # a dry run records nothing
