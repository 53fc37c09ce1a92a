"""From zero to the Prefect UI: server, work pool, deployments, worker.

Each step is the Prefect CLI a user would type (so what the docs say and what this does
stay the same), run against `api_url`. `up()` is what `flywheel server` calls; tests
call the steps one by one against a throw-away server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: prefect.yaml and runs/
POOL = "flywheel-local"


def prefect_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "prefect"
    return [str(exe)] if exe.exists() else [shutil.which("prefect") or "prefect"]


def prefect_env(api_url: str, home: str | None = None) -> dict:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if home:
        env["PREFECT_HOME"] = home
    return env


def run_prefect(args: list[str], env: dict, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [*prefect_cmd(), "--no-prompt", *args], env=env, cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if check and res.returncode != 0:
        raise RuntimeError(f"prefect {' '.join(args)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return res


def start_server(host: str, port: int, env: dict, log_path: Path) -> subprocess.Popen:
    """Start `prefect server start` in its own process group; wait until it answers."""
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [*prefect_cmd(), "server", "start", "--host", host, "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    url = f"http://{host}:{port}/api/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited; see {log_path}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_process(proc)
    raise RuntimeError(f"prefect server did not answer on {url} within 120 s; see {log_path}")


def create_pool(env: dict, pool: str = POOL) -> None:
    res = run_prefect(["work-pool", "create", pool, "--type", "process"], env, check=False)
    if res.returncode != 0 and "already exists" not in (res.stdout + res.stderr):
        raise RuntimeError(f"could not create work pool {pool}: {res.stdout}{res.stderr}")


def deploy(env: dict) -> None:
    """Deploy everything in prefect.yaml; its pull step points the worker at this root."""
    run_prefect(["deploy", "--all"], {**env, "PWD": str(PROJECT_ROOT)})


def start_worker(env: dict, pool: str = POOL, run_once: bool = False, log_path: Path | None = None) -> subprocess.Popen:
    args = [*prefect_cmd(), "worker", "start", "--pool", pool, *(["--run-once"] if run_once else [])]
    out = open(log_path, "ab") if log_path else None
    return subprocess.Popen(args, env=env, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True)


def stop_process(proc: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM the process group, then SIGKILL what is left."""
    import signal

    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _sigterm_is_an_interrupt() -> None:
    """SIGTERM (a service manager, `kill`) stops the worker and the server as Ctrl-C does:
    Python's default would end this process at once and leave both running, orphaned in
    their own sessions."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def up(host: str = "127.0.0.1", port: int = 4200, worker: bool = True, say=print) -> None:
    """Server, pool, deployments and (in the foreground) a worker; Ctrl-C or SIGTERM
    stops all."""
    _sigterm_is_an_interrupt()
    api_url = f"http://{host}:{port}/api"
    env = prefect_env(api_url)
    run_dir = PROJECT_ROOT / "runs"
    run_dir.mkdir(exist_ok=True)
    t0 = time.monotonic()
    server = start_server(host, port, env, run_dir / "prefect-server.log")
    say(f"Prefect server up in {time.monotonic() - t0:.1f}s: UI at http://{host}:{port}")
    try:
        create_pool(env)
        deploy(env)
        say(f"Deployed prefect.yaml to work pool {POOL}. Start runs from the UI or with:")
        say("  PREFECT_API_URL=" + api_url + " prefect deployment run 'flywheel/flywheel-cpu'")
        if worker:
            say("Worker running; Ctrl-C (or SIGTERM) stops the worker and the server.")
            proc = start_worker(env)
            try:
                proc.wait()
            except KeyboardInterrupt:
                stop_process(proc)
        else:
            say("Server left running (pid %d); stop it with: kill -- -%d" % (server.pid, server.pid))
            return
    finally:
        if worker:
            stop_process(server)
