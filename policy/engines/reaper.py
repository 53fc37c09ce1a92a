"""A run killed by a signal it cannot catch (the kernel's OOM killer, `kill -9`) cannot shut
its vLLM engine down, and the engine's processes live on: its core and its worker, 5-6 GB
at 0.5B, the worker busy on a core, until someone kills them by hand. The next run on the
machine then starts short of memory and CPU (bench/README.md, the 0.5B's second full try).

`reap_at_death(pids)` starts a small watcher process for the processes an engine just
started: once the process that started them is gone, it terminates them (SIGTERM, then
SIGKILL after 10 s). It exits as soon as they are all gone, so an engine closed normally
leaves nothing behind, and a restarted engine gets a watcher of its own.

The in-process engine (vllm_engine.py) and a vLLM server the run starts (vllm_server.py)
both call it once the engine is up.

What it does not do: watch processes started after the call (the engine's worker starts
before it returns); other children of the run: Prefect's ephemeral server (a few hundred
MB) outlives a SIGKILL too and is left to Prefect."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

WATCHER = r"""
import contextlib, sys, time
import psutil

def process(pid):
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(int(pid))  # its start time pins it: a reused pid is not it

def alive(p):
    with contextlib.suppress(psutil.NoSuchProcess):  # a zombie is dead: its parent's wait removes it
        return p is not None and p.status() != psutil.STATUS_ZOMBIE
    return False

parent, targets = process(sys.argv[1]), [p for p in map(process, sys.argv[2:]) if p]
while alive(parent):
    targets = [p for p in targets if alive(p)]
    if not targets:
        sys.exit(0)
    time.sleep(1.0)
for p in targets:
    with contextlib.suppress(psutil.NoSuchProcess):
        p.terminate()
for p in psutil.wait_procs(targets, timeout=10)[1]:
    with contextlib.suppress(psutil.NoSuchProcess):
        p.kill()
"""


def descendants(pid: int | None = None) -> set[int]:
    """The descendants of `pid` (this process) now; none once it is gone."""
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def reap_at_death(pids: set[int]) -> subprocess.Popen | None:
    """A watcher that ends `pids` once this process is gone (None: nothing to watch)."""
    if not pids:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", WATCHER, str(os.getpid()), *map(str, sorted(pids))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the run's terminal is the run's, not the watcher's
    )
