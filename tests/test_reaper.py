"""policy/engines/reaper.py with real processes: a parent that starts a child which starts a
grandchild, both by multiprocessing's spawn as vLLM starts its engine core and worker. Killed
with SIGKILL, the parent leaves them running; with the watcher, they end."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

PARENT = r"""
import multiprocessing as mp, os, sys, time
import psutil
from flywheel.policy.engines.reaper import descendants, reap_at_death

def grandchild():
    time.sleep(300)

def child():
    mp.get_context("spawn").Process(target=grandchild).start()
    time.sleep(300)

if __name__ == "__main__":
    before = descendants()
    mp.get_context("spawn").Process(target=child).start()
    while not any(p.ppid() != os.getpid() for p in psutil.Process().children(recursive=True)):
        time.sleep(0.1)  # the grandchild: vLLM's worker, started by its engine core
    started = descendants() - before
    watcher = reap_at_death(started) if sys.argv[1] == "watch" else None
    print(" ".join(map(str, sorted(started))), watcher.pid if watcher else 0, flush=True)
    time.sleep(300)
"""


def _start(tmp_path, mode):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True)
    pids, watcher = parent.stdout.readline().rsplit(" ", 1)
    return parent, [psutil.Process(int(p)) for p in pids.split()], int(watcher)


def _alive(procs):
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="vLLM's CPU build runs on Linux")
def test_a_killed_runs_engine_processes_end_with_the_watcher_and_live_on_without(tmp_path):
    parent, procs, _ = _start(tmp_path, "none")
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        time.sleep(3)
        assert len(_alive(procs)) >= 2  # what the watcher is for: orphans
    finally:
        for p in _alive(procs):
            p.kill()

    parent, procs, watcher = _start(tmp_path, "watch")
    assert len(procs) >= 2 and watcher
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(procs), "the engine's processes outlived the killed run"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="vLLM's CPU build runs on Linux")
def test_the_watcher_leaves_when_the_engine_is_closed_normally(tmp_path):
    parent, procs, watcher = _start(tmp_path, "watch")
    try:
        for p in procs:
            p.kill()  # the engine shut down; the run goes on
        deadline = time.monotonic() + 10
        while psutil.pid_exists(watcher) and psutil.Process(watcher).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the watcher outlived what it watched"
            time.sleep(0.2)
        assert parent.poll() is None  # and it never touched the run
    finally:
        parent.kill()
        parent.wait()


ENGINE = r"""
import sys
import time

from flywheel import use_offline_defaults
from flywheel.config import EngineConfig
from flywheel.policy.engines.reaper import descendants
from flywheel.policy.engines.vllm_engine import VLLMEngine
from flywheel.policy.engines.vllm_server import VLLMServer

if __name__ == "__main__":  # vLLM starts its engine core by spawn, which imports this file
    use_offline_defaults()
    if sys.argv[2] == "engine":
        engine = VLLMEngine(sys.argv[1], EngineConfig(max_model_len=256), seed=0)
    else:
        server = VLLMServer(sys.argv[1], max_model_len=256, log_path=sys.argv[3]).start()
    print("PIDS", *sorted(descendants()), flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["engine", "server"])
def test_a_real_vllm_engine_ends_with_its_killed_run(tiny_model, tmp_path, kind):
    """The real engine, in-process or as a `vllm serve` the run started in its own session:
    its processes end after the process that started them is killed with SIGKILL, as the
    kernel's OOM killer kills a run."""
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    args = [sys.executable, str(script), tiny_model, kind, str(tmp_path / "server.log")]
    run = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = next(ln for ln in run.stdout if ln.startswith("PIDS"))  # vLLM logs on stdout too
    procs = [psutil.Process(int(p)) for p in line.split()[1:]]
    engine = [p for p in procs if p.name().startswith("VLLM") or "VLLM" in " ".join(p.cmdline())]
    assert engine, [p.cmdline() for p in procs]
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 30
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = []
    for p in _alive(procs):
        with contextlib.suppress(psutil.Error):
            left.append(p.name())
            p.kill()
    assert not left, f"outlived the killed run: {left}"
