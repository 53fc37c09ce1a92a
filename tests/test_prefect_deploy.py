"""From zero to a deployment run on a real Prefect server: start the server, create the
process pool, deploy prefect.yaml, trigger a run with parameters, let a worker run it,
and check that it completed and wrote to the lake. Everything started is stopped."""

import json
import time

import httpx
import pytest

from flywheel import server as srv
from storage.lake import Lake

from .conftest import free_port

pytestmark = pytest.mark.integration


def flow_runs(api_url: str) -> list[dict]:
    return httpx.post(f"{api_url}/flow_runs/filter", json={}, timeout=10).json()


def test_deploy_and_run_from_a_real_server(tmp_path, tiny_model):
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = srv.prefect_env(api_url, home=str(tmp_path / "prefect-home"))
    t0 = time.monotonic()
    server = srv.start_server("127.0.0.1", port, env, tmp_path / "server.log")
    print(f"prefect server start-up: {time.monotonic() - t0:.1f}s")
    worker = None
    try:
        srv.create_pool(env)
        srv.deploy(env)
        names = {d["name"] for d in httpx.post(f"{api_url}/deployments/filter", json={}, timeout=10).json()}
        assert {"flywheel-cpu", "cycle", "evaluate", "nightly", "ingest-traces"} <= names
        runs_dir = tmp_path / "runs"
        config = {
            "run_id": "deployed", "runs_dir": str(runs_dir), "cycles": 1,
            "model": {"path": tiny_model}, "engine": {"max_model_len": 512},
            "sampler": {"tasks_per_cycle": 2}, "sampling": {"k": 2, "max_tokens": 16},
            "eval": {"before_and_after": False},
        }  # fmt: skip
        srv.run_prefect(["deployment", "run", "flywheel/flywheel-cpu", "--params", json.dumps({"config": config})], env)
        worker = srv.start_worker(env, run_once=True, log_path=tmp_path / "worker.log")
        worker.wait(600)
        runs = [r for r in flow_runs(api_url) if r["parameters"].get("config", {}).get("run_id") == "deployed"]
        assert runs, (tmp_path / "worker.log").read_text()[-3000:]
        assert runs[0]["state_type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-3000:]
        assert runs[0]["name"] == "flywheel-deployed"
        assert Lake(str(runs_dir / "deployed" / "lake")).committed_cycles("deployed") == [0]
        artifacts = httpx.post(f"{api_url}/artifacts/filter", json={}, timeout=10).json()
        mine = [a for a in artifacts if a["flow_run_id"] == runs[0]["id"]]
        assert {"progress", "table", "markdown", "image"} <= {a["type"] for a in mine}
        # Prefect stores a link artifact as markdown: "[text](url)"
        assert any(a["key"] == "deployed-lake" and "(file://" in a["data"] for a in mine)
    finally:
        if worker is not None:
            srv.stop_process(worker)
        srv.stop_process(server)
    assert server.poll() is not None
