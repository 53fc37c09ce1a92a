"""From zero to a deployment run on a real Prefect server: start the server, create the
process pool, deploy prefect.yaml, trigger a run with parameters, let a worker run it,
and check that it completed and wrote to the lake. Everything started is stopped.

The CI set runs the `ingest-traces` deployment (the worker's flow run needs no model);
the `flywheel-cpu` deployment's run (a cycle of the tiny model in the worker's
subprocess, ~135 s) is marked slow: the flywheel flow itself runs against a real Prefect
server in tests/test_cycle.py, which also checks its artifacts."""

import json
import time

import httpx
import pytest

from flywheel.cli import prefect_server as srv
from flywheel.storage.lake import Lake
from flywheel.storage.traces import TraceStore

from .conftest import free_port

pytestmark = pytest.mark.integration


def flow_runs(api_url: str) -> list[dict]:
    return httpx.post(f"{api_url}/flow_runs/filter", json={}, timeout=10).json()


@pytest.fixture
def deployed(tmp_path):
    """A Prefect server with the pool and every deployment of prefect.yaml; yields
    (api_url, run) where run(deployment, params) runs it once on a worker and
    returns the flow run."""
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = srv.prefect_env(api_url, home=str(tmp_path / "prefect-home"))
    t0 = time.monotonic()
    server = srv.start_server("127.0.0.1", port, env, tmp_path / "server.log")
    print(f"prefect server start-up: {time.monotonic() - t0:.1f}s")
    workers = []

    def run(deployment: str, params: dict) -> dict:
        """deployment: "<flow name>/<deployment name>", as `prefect deployment run` takes it."""
        before = {r["id"] for r in flow_runs(api_url)}
        srv.run_prefect(["deployment", "run", deployment, "--params", json.dumps(params)], env)
        workers.append(srv.start_worker(env, run_once=True, log_path=tmp_path / "worker.log"))
        workers[-1].wait(600)
        runs = [r for r in flow_runs(api_url) if r["id"] not in before]
        log = (tmp_path / "worker.log").read_text()[-3000:]
        assert len(runs) == 1 and runs[0]["state_type"] == "COMPLETED", log
        return runs[0]

    try:
        srv.create_pool(env)
        srv.deploy(env)
        names = {d["name"] for d in httpx.post(f"{api_url}/deployments/filter", json={}, timeout=10).json()}
        assert {"flywheel-cpu", "cycle", "evaluate", "nightly", "ingest-traces"} <= names
        yield api_url, run
    finally:
        for worker in workers:
            srv.stop_process(worker)
        srv.stop_process(server)
    assert server.poll() is not None


def artifacts_of(api_url: str, flow_run: dict) -> list[dict]:
    artifacts = httpx.post(f"{api_url}/artifacts/filter", json={}, timeout=10).json()
    return [a for a in artifacts if a["flow_run_id"] == flow_run["id"]]


def test_deploy_and_run_a_deployment_on_a_worker(deployed, tmp_path):
    api_url, run = deployed
    drop = tmp_path / "incoming"
    drop.mkdir()
    records = [{"messages": [{"role": "user", "content": f"What is {i} + 1?"},
                             {"role": "assistant", "content": str(i + 1)}]} for i in range(3)]  # fmt: skip
    (drop / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lake = tmp_path / "lake"
    flow_run = run("ingest/ingest-traces", {"paths": [str(drop)], "store": str(lake)})
    assert len(TraceStore(Lake(str(lake))).known_ids()) == 3
    assert "table" in {a["type"] for a in artifacts_of(api_url, flow_run)}


@pytest.mark.slow  # ~135 s: the deployment path is the test above's; the flywheel flow on a server is test_cycle's
def test_the_flywheel_deployment_runs_a_cycle(deployed, tmp_path, tiny_model):
    api_url, run = deployed
    runs_dir = tmp_path / "runs"
    config = {
        "run_id": "deployed", "runs_dir": str(runs_dir), "cycles": 1,
        "model": {"path": tiny_model}, "engine": {"max_model_len": 512},
        "sampler": {"tasks_per_cycle": 2}, "generation": {"k": 2, "max_tokens": 16},
        "eval": {"before_and_after": False},
    }  # fmt: skip
    flow_run = run("flywheel/flywheel-cpu", {"config": config})
    assert flow_run["name"] == "flywheel-deployed"
    assert Lake(str(runs_dir / "deployed" / "lake")).committed_cycles("deployed") == [0]
    mine = artifacts_of(api_url, flow_run)
    assert {"progress", "table", "markdown", "image"} <= {a["type"] for a in mine}
    # Prefect stores a link artifact as markdown: "[text](url)"
    assert any(a["key"] == "deployed-lake" and "(file://" in a["data"] for a in mine)


def test_deployments_schedule_nothing_unasked_and_queue_training(deployed):
    """Every schedule is created inactive; the nightly one continues a named run; training,
    evaluation and production deployments are tagged and limited to one run at a time; SFT
    and the gated deploy are deployments too, so the whole production loop can be scheduled;
    the scheduled variants retry, the interactive flows do not."""
    api_url, _ = deployed
    found = {d["name"]: d for d in httpx.post(f"{api_url}/deployments/filter", json={}, timeout=10).json()}
    assert {"sft", "gated-deploy", "nightly", "ingest-traces"} <= set(found)
    for name, d in found.items():
        assert all(not s["active"] for s in d.get("schedules", [])), f"{name} has an active schedule"
        limit = d.get("concurrency_limit") or (d.get("global_concurrency_limit") or {}).get("limit")
        assert limit == 1, f"{name}: concurrency limit {limit}"
        assert "flywheel" in d["tags"], name
    assert found["nightly"]["parameters"]["config"]["run_id"] == "nightly"
    assert {"training"} <= set(found["flywheel-cpu"]["tags"]) and {"production"} <= set(found["gated-deploy"]["tags"])

    from flywheel.flows.flywheel import flywheel
    from flywheel.flows.scheduled import flywheel_scheduled
    from flywheel.flows.sft import sft

    assert flywheel_scheduled.retries >= 1 and flywheel_scheduled.name == flywheel.name
    assert not flywheel.retries and not sft.retries
