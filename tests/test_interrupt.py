"""Stopping: a terminal's Ctrl-C (SIGINT to the whole process group) ends `flywheel run`
within 10 seconds, its flow run ends in a terminal state in the Prefect server, and the
same run id resumes it; SIGTERM to `flywheel server` stops its Prefect server and worker."""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

pytestmark = pytest.mark.integration


def _flow_run_state(api_url: str, name: str) -> str | None:
    runs = httpx.post(f"{api_url}/flow_runs/filter", json={"flow_runs": {"name": {"any_": [name]}}}, timeout=10).json()
    return runs[0]["state"]["type"] if runs else None


def test_ctrl_c_stops_within_ten_seconds_and_the_run_resumes(tiny_model, tmp_path, prefect_server):
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    args = [sys.executable, "-m", "flywheel.cli", "run", "--model", tiny_model, "--cycles", "1", "--run-id", "stop",
            "--set", f"runs_dir={tmp_path}", "--set", "sampler.tasks_per_cycle=2", "--set", "generation.k=2",
            "--set", "generation.max_tokens=16", "--set", "engine.max_model_len=512",
            "--set", "eval.before_and_after=false"]  # fmt: skip
    env = {**os.environ, "PREFECT_API_URL": api_url}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    log = tmp_path / "stop" / "log.txt"
    deadline = time.monotonic() + 300
    while not (log.exists() and "generate-stop-c0" in log.read_text(errors="replace")):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the run never started generating"
        time.sleep(0.2)
    time.sleep(1.0)  # in the middle of cycle 0's generation
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    try:
        out = proc.communicate(timeout=60)[0].decode()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # no orphan left holding ports for later tests
        raise AssertionError(log.read_text(errors="replace")[-4000:]) from None
    took = time.monotonic() - t0
    print(f"stopped {took:.1f}s after the signal")
    assert took < 10, f"stopped in {took:.1f}s"
    assert proc.returncode != 0 and "stopping" in out, out[-2000:]
    assert _flow_run_state(api_url, "flywheel-stop") in ("CRASHED", "CANCELLED", "FAILED")
    assert "Traceback" not in out, out[-2000:]  # the console stays readable: details in log.txt

    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "cycle 0:" in done.stdout  # the interrupted cycle, redone from its start
    assert "vllm" not in done.stdout.lower()  # the libraries' chatter went to the run's log


def test_sigterm_stops_flywheel_server_with_its_server_and_worker(tmp_path):
    import psutil

    from flywheel.storage.seaweed import free_port

    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "flywheel.cli", "server", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines = []
    deadline = time.monotonic() + 300
    while not any("Worker running" in ln for ln in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
        lines.append(proc.stdout.readline())
    time.sleep(2)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children  # the server and the worker, in their own sessions
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, [p.cmdline()[:3] for p in alive]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2)
