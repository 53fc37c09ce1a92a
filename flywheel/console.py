"""A CLI run's terminal: one live display, library chatter in the run's log, a clean stop.

`run_console(log_path, verbose)` is what `flywheel run`, `sft` and `eval` wrap their flow in:

- **Quiet.** File descriptors 1 and 2 (this process's and those of every child started
  inside: vLLM's engine core, DeepSpeed's compiler, the sandbox workers) are pointed at
  `log_path`; the live display (flywheel/progress.py's RichReporter) draws on the
  terminal through a copy of the original descriptor. `--verbose` leaves them alone.
- **Stops in seconds.** SIGTERM is turned into KeyboardInterrupt, as Ctrl-C is, so the
  flow's `finally` blocks run (engine, sandbox and Ray stopped; every finished stage is
  already in the lake, so `--run-id` resumes). A second signal kills what is left at once.
- **The engine outlives the interrupt.** vLLM's engine core is started deaf to SIGINT
  (`deaf_to_ctrl_c`, in flywheel/runtime.py), so it keeps answering until the run's own
  shutdown stops it, and the main thread, woken by its next output, raises.
- **The flow run ends in a terminal state.** With Prefect's ephemeral server (no
  PREFECT_API_URL), that server is this process's child: a terminal's Ctrl-C reaches its
  whole process group, so the server died first, and Prefect's crash report then retried
  it for minutes while the run stayed "Running". The server is started here with SIGINT
  blocked (a blocked signal stays blocked across exec), so it outlives the interrupt, the
  run is recorded as Crashed, and the server stops at exit as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path


@contextlib.contextmanager
def deaf_to_ctrl_c():
    """Processes (and threads) started inside do not get the terminal's SIGINT: they are
    stopped by our own shutdown instead. Used for the ephemeral Prefect server and vLLM's
    engine core: had the engine core died of a Ctrl-C first, the main thread would wait
    forever for its next output, since a signal taken by another thread does not wake a
    blocked lock wait (so our handler never ran)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_ephemeral_server():
    """Start this process's ephemeral Prefect server now, deaf to the terminal's SIGINT;
    returns it (None when PREFECT_API_URL names a server)."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return None
    from prefect.server.api.server import SubprocessASGIServer

    with deaf_to_ctrl_c():
        server = SubprocessASGIServer()  # the one the flow engine uses (one per process)
        server.start()
        return server


def _kill_children() -> None:
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(Exception):
                child.kill()
    except ImportError:
        pass


@contextlib.contextmanager
def run_console(log_path: Path, verbose: bool = False):
    """Yields the text stream the live display writes to (the terminal)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1, encoding="utf-8", errors="replace")
    log = open(log_path, "ab", buffering=0)
    if not verbose:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    stopping = {"signals": 0}

    def on_signal(signum, frame):
        stopping["signals"] += 1
        if stopping["signals"] > 1:  # the second one: no more waiting
            terminal.write("\nforced stop\n")
            terminal.flush()
            _kill_children()
            os._exit(130)
        terminal.write(f"\n{signal.Signals(signum).name}: stopping (the run resumes with --run-id) ...\n")
        terminal.flush()
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = None
    try:
        server = start_ephemeral_server()
        yield terminal
    finally:
        if server is not None:  # now, so its goodbye goes to the log, not after the summary
            with contextlib.suppress(Exception):
                server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        log.close()
        terminal.flush()
