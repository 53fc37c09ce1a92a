"""A real MLflow tracking server for the tests, from the server's own virtualenv
(.venv-mlflow, made by scripts/setup.sh: mlflow pins pyarrow<26)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent


def mlflow_binary() -> str:
    path = Path(os.environ.get("MLFLOW_VENV", REPO / ".venv-mlflow")) / "bin" / "mlflow"
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: run scripts/setup.sh (it makes the MLflow server's virtualenv)"
        )
    return str(path)


def start_mlflow_server(port: int, root: Path, timeout: float = 120) -> subprocess.Popen:
    """`mlflow server` on loopback with a SQLite store and served artifacts under `root`;
    returns once /health answers."""
    root.mkdir(parents=True, exist_ok=True)
    log = open(root / f"server-{port}.log", "ab")
    cmd = [mlflow_binary(), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_mlflow_server(proc)
            raise RuntimeError(
                f"mlflow server did not start: {(root / f'server-{port}.log').read_text()[-3000:]}"
            )
        time.sleep(0.5)


def stop_mlflow_server(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
