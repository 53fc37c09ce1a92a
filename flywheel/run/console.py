"""A CLI run's terminal: one live display, library chatter in the run's log, a clean stop.

`run_console(log_path, verbose)` is what `flywheel run`, `sft` and `eval` wrap their flow in:

- **Quiet.** File descriptors 1 and 2 (this process's and those of every child started
  inside: vLLM's engine core, DeepSpeed's compiler, the sandbox workers) are pointed at
  `log_path`; the live display (flywheel/reports/progress.py's RichReporter) draws on the
  terminal through a copy of the original descriptor. `--verbose` leaves them alone.
- **Stops in seconds.** SIGTERM is turned into KeyboardInterrupt, as Ctrl-C is, so the
  flow's `finally` blocks run (engine, sandbox and Ray stopped; every finished stage is
  already in the lake, so `--run-id` resumes). A second signal kills what is left at once.
- **The engine outlives the interrupt.** vLLM's engine core is started deaf to SIGINT
  (`start_deaf_to_ctrl_c`, in flywheel/run/runtime.py), so it keeps answering until the run's own
  shutdown stops it, and the main thread, woken by its next output, raises.
- **A lost interrupt is raised again.** The handler's KeyboardInterrupt is swallowed when
  it lands inside a `__del__`; the flow calls `check_stop()` between stages, which raises
  it again.
- **Stops even when the main thread cannot.** A watcher thread hears every signal through
  `signal.set_wakeup_fd` (written by the C-level handler, whichever thread took the
  signal); if the process still runs `STOP_GRACE_S` later (the main thread stuck in a call
  that never returns to Python), it writes every thread's stack to the log, kills the
  children and exits 130. Once the run has unwound, the process gets `EXIT_GRACE_S` to
  exit (Prefect's exit-time log drain retried a stopped ephemeral server for a minute).
- **A Ctrl-C during a start-up is not lost.** The deaf start-up runs in a helper thread that
  blocks SIGINT (children inherit the mask of the thread that forks them); the main thread
  never blocks it, so the kernel hands it the signal and its wait is interrupted. Blocking
  SIGINT in the main thread instead sent a Ctrl-C during vLLM's 20-40 s start-up to some
  other thread, and CPython ran the handler only when the run had ended.
- **The flow run ends in a terminal state.** With Prefect's ephemeral server (no
  PREFECT_API_URL), that server is this process's child: a terminal's Ctrl-C reaches its
  whole process group, so the server died first, and Prefect's crash report then retried
  it for minutes while the run stayed "Running". The server is started here with SIGINT
  blocked (a blocked signal stays blocked across exec), so it outlives the interrupt, the
  run is recorded as Crashed, and the server stops at exit as before.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path


def start_deaf_to_ctrl_c(start, name: str = "deaf-start"):
    """`start()`, run in a helper thread that blocks SIGINT, so the processes (and threads)
    it starts do not get the terminal's SIGINT: they are stopped by our own shutdown
    instead. Used for the ephemeral Prefect server and vLLM's engine core: had the engine
    core died of a Ctrl-C first, the main thread would wait forever for its next output.
    The main thread waits interruptibly: on Ctrl-C it kills the children started meanwhile
    (a half-started engine has no owner to stop it) and raises at once."""
    before = _children()
    box: dict = {}

    def target():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            box["value"] = start()
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)  # daemon: never holds up an exit
    thread.start()
    try:
        thread.join()
    except BaseException:
        _kill_children(exclude=before)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def start_ephemeral_server():
    """Start this process's ephemeral Prefect server now, deaf to the terminal's SIGINT;
    returns it (None when PREFECT_API_URL names a server)."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return None
    from prefect.server.api.server import SubprocessASGIServer

    def start():
        server = SubprocessASGIServer()  # the one the flow engine uses (one per process)
        server.start()
        return server

    return start_deaf_to_ctrl_c(start, "prefect-server-start")


def _children() -> set[int]:
    try:
        import psutil

        return {p.pid for p in psutil.Process().children(recursive=True)}
    except ImportError:
        return set()


def _kill_children(exclude: set[int] = frozenset()) -> None:
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            if child.pid not in exclude:
                with contextlib.suppress(Exception):
                    child.kill()
    except ImportError:
        pass


_STOP = threading.Event()  # set by the stop signal's handler, for check_stop


def check_stop() -> None:
    """Raise KeyboardInterrupt if a stop signal came in. Called between stages: the
    handler's own raise is lost when it lands inside a `__del__` run by the garbage
    collector (Python prints "Exception ignored" and goes on; seen in CI, where the run then
    went on to its next cycle)."""
    if _STOP.is_set():
        raise KeyboardInterrupt


STOP_GRACE_S = 8.0  # after a stop signal, what the run gets to unwind before it is ended
EXIT_GRACE_S = 2.0  # once unwound, what the libraries' exit work gets (Prefect's log drain)


def _watch_for_stop(heard: socket.socket, log_fd: int, terminal, unwound: threading.Event) -> None:
    """A daemon thread: waits for a stop signal's byte, then gives the run STOP_GRACE_S to
    unwind and the process EXIT_GRACE_S more to exit. Owns `heard` and `log_fd` (a copy of
    the log's descriptor, still open after run_console)."""
    with heard:
        while True:
            try:
                data = heard.recv(1)
            except OSError:
                data = b""
            if not data:  # run_console ended without a stop signal
                os.close(log_fd)
                return
            if data[0] in (signal.SIGINT, signal.SIGTERM):
                break
    if unwound.wait(STOP_GRACE_S):  # the flow run is recorded, the engine stopped
        time.sleep(EXIT_GRACE_S)
    else:
        with contextlib.suppress(Exception):
            terminal.write(
                f"\nstill running {STOP_GRACE_S:.0f}s after the signal: forced stop (stacks in the log)\n"
            )
            terminal.flush()
            faulthandler.dump_traceback(file=log_fd, all_threads=True)
    _kill_children()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(130)


def _drain_prefect(timeout: float) -> None:
    """Send Prefect's queued logs and events while its ephemeral server still answers: left
    for exit, they were retried against the stopped server ("Error logging to API" on the
    terminal after the summary, and up to a minute's wait)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=timeout)
    EventsWorker.drain_all(timeout=timeout)


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
        _STOP.set()
        terminal.write(f"\n{signal.Signals(signum).name}: stopping (the run resumes with --run-id) ...\n")
        terminal.flush()
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    heard, wakeup = socket.socketpair()
    unwound = threading.Event()
    wakeup.setblocking(False)
    previous_wakeup = signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)
    watcher = threading.Thread(
        target=_watch_for_stop, args=(heard, os.dup(log.fileno()), terminal, unwound), daemon=True
    )
    watcher.start()
    server = None
    try:
        server = start_ephemeral_server()
        yield terminal
    finally:
        if server is not None:  # now, so its goodbye goes to the log, not after the summary
            with contextlib.suppress(Exception):
                _drain_prefect(timeout=2)
                server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_wakeup)
        _STOP.clear()  # a notebook's next run starts afresh
        if not stopping["signals"]:  # no stop under way: the watcher ends; else it keeps the deadline
            wakeup.close()
        unwound.set()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        log.close()
        terminal.flush()
