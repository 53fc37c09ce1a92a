"""A run killed by a signal it cannot catch (the kernel's OOM killer, `kill -9`) cannot shut
its vLLM engine down, and the engine's processes live on: its core and its worker, 5-6 GB
at 0.5B, the worker busy on a core, until someone kills them by hand. The next run on the
machine then starts short of memory and CPU (bench/README.md, the 0.5B's second full try).

`reap_at_death(pids)` starts a small watcher process for the processes an engine just
started: once the process that started them is gone, it terminates them (SIGTERM, then
SIGKILL after 10 s). It exits as soon as they are all gone, so an engine closed normally
leaves nothing behind, and a restarted engine gets a watcher of its own.

What it does not do: watch processes started after the call (the engine's worker starts
inside vLLM's constructor, before it); other children of the run: Prefect's ephemeral
server (a few hundred MB) outlives a SIGKILL too and is left to Prefect."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

WATCHER = r"""
import sys, time
import psutil

try:
    parent = psutil.Process(int(sys.argv[1]))
except psutil.NoSuchProcess:  # gone before this watcher got going
    parent = None
targets = []
for pid in sys.argv[2:]:
    try:
        targets.append(psutil.Process(int(pid)))  # its start time pins it: a reused pid is not it
    except psutil.NoSuchProcess:
        pass
def alive(p):
    try:  # a zombie is dead: only its own parent's wait removes it
        return p is not None and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

while alive(parent):
    targets = [p for p in targets if alive(p)]
    if not targets:
        sys.exit(0)
    time.sleep(1.0)
for p in targets:
    try:
        p.terminate()
    except psutil.NoSuchProcess:
        pass
_, left = psutil.wait_procs(targets, timeout=10)
for p in left:
    try:
        p.kill()
    except psutil.NoSuchProcess:
        pass
"""


def descendants() -> set[int]:
    """This process's descendants now."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


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
