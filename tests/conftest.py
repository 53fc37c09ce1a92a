"""Shared fixtures: a tiny model (random weights, real SmolLM2 tokenizer), a real
SeaweedFS S3 server, one Prefect test server and one vLLM OpenAI server (the tiny model;
~30-90 s to start on CPU) for the whole session; the tiny model on the `hf` engine for each
module that asks (the gateway tests)."""

from __future__ import annotations

import os

import pytest

import flywheel

flywheel.use_offline_defaults()  # before any library reads them, as the CLI does
# The trainer's default is bf16 on a CPU with bf16 units (policy/trainer.py uses_bf16): tests
# that assert float32 numerics get float32 on any CI machine; bf16 is tested where asked for.
os.environ.setdefault("FLYWHEEL_CPU_BF16", "0")
from flywheel.storage.seaweed import free_port  # noqa: F401  (tests import it from here)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    from flywheel.run.model_prep import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="module")
def hf(tiny_model):
    from flywheel.config import EngineConfig
    from flywheel.policy.engines import make_engine

    engine = make_engine(tiny_model, EngineConfig(backend="hf"))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A real S3 server on loopback (storage/seaweed.py), its credentials in the standard
    AWS environment variables. Yields the endpoint URL."""
    from flywheel.storage.seaweed import SeaweedServer

    server = SeaweedServer(
        tmp_path_factory.mktemp("seaweedfs"), access_key="flywheel-test", secret_key="flywheel-secret"
    )
    with pytest.MonkeyPatch.context() as env:
        for key, value in server.env.items():
            env.setenv(key, value)
        try:
            server.start(bucket="flywheel-test")
            yield server.endpoint
        finally:
            server.stop()


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tmp_path_factory):
    """A real vLLM OpenAI server serving the tiny model, with flywheel's weight pushes.
    Tests that use it push their own weights first (its weights are whatever the last
    test left). Its teardown is the test that `stop` ends every server process (engine
    core and workers: nothing left in its session), which a server of its own would
    check at the cost of a second start-up (~70 s)."""
    import os

    from flywheel.policy.engines.vllm_server import VLLMServer

    srv = VLLMServer(tiny_model, max_model_len=512, log_path=tmp_path_factory.mktemp("vllm") / "server.log")
    srv.start()
    yield srv
    srv.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(srv.proc.pid, 0)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` (tests/mlflow_server.py). Yields its tracking URI."""
    from .mlflow_server import start_mlflow_server, stop_mlflow_server

    port = free_port()
    proc = start_mlflow_server(port, tmp_path_factory.mktemp("mlflow"))
    yield f"http://127.0.0.1:{port}"
    stop_mlflow_server(proc)


@pytest.fixture(scope="session", autouse=True)
def mlflow_store(tmp_path_factory):
    """One MLflow SQLite store for the session's runs (tracking.backends' default is mlflow):
    MLflow's own MLFLOW_TRACKING_URI, which CLI runs in subprocesses inherit. Without it,
    each test's runs_dir would make and migrate a store of its own (~1.3 s each)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(
            "MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path_factory.mktemp('mlflow-store') / 'mlflow.db'}"
        )
        yield
