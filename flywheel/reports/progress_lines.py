"""Progress as plain lines, for an output that is not a terminal (CI, nohup, a Prefect
worker's log, a notebook's captured stdout).

rich's live bars (flywheel/reports/progress.py's RichReporter) redraw in place on a terminal; on
a pipe or file rich draws nothing until the display stops, so a two-hour run showed
nothing until its end. `LineReporter` writes one time-stamped line when a stage starts,
one every `every_s` seconds while it runs, and one when it ends with its count and
seconds, each flushed at once. The lines while it runs come from a daemon thread, not
from the stage's own progress: an evaluation hands vLLM all its prompts in one call, and
its count moves only when that call returns (the 0.5B's 296 prompts: minutes of
silence). `stage_done` reports the cycle's stages that have no progress bar (sample,
archive, update, replay: flows/flywheel.py). `display_reporter`
picks the reporter for a stream; `lines_unless_shown` gives a flow run outside the CLI
(a Prefect worker, a notebook) lines on its stdout.

What it does not do: colours, cursor movement or redrawing; it never reads the terminal
size (tables render 150 wide).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from datetime import datetime, timezone

from flywheel.reports.progress import Reporter, reporter, set_reporter


class LineReporter(Reporter):
    def __init__(self, file=None, every_s: float = 30.0) -> None:
        from rich.console import Console

        self.file = file or sys.stdout
        self.every_s = every_s
        # no colour, no cursor codes: a pipe gets the text only
        self.console = Console(
            file=self.file, width=150, force_terminal=False, no_color=True, highlight=False
        )
        self._stages: dict[str, dict] = {}
        # when each bar's end line went out (stage_done does not repeat it)
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None

    def line(self, text: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
        try:
            self.file.write(f"{stamp} {text}\n")
            self.file.flush()
        except (ValueError, OSError):  # the stream was closed under us: progress never fails a run
            pass

    def start(self, name, total):
        state = {"t0": time.monotonic(), "last": time.monotonic(), "done": 0, "total": total}
        self.line(f"{name}: started, {total} to do")
        with self._lock:
            self._stages[name] = state
            if self.every_s > 0 and self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
                self._ticker.start()

        def advance(n: int) -> None:
            with self._lock:
                state["done"] += n
            self._due(name, state)

        return advance

    def _due(self, name: str, state: dict) -> None:
        """The stage's line, when `every_s` has passed since its last one."""
        with self._lock:
            now = time.monotonic()
            if now - state["last"] < self.every_s or self._stages.get(name) is not state:
                return
            state["last"] = now
            self.line(f"{name}: {state['done']}/{state['total']} after {now - state['t0']:.0f} s")

    def _tick(self) -> None:
        """Lines for the open stages whose count has not moved: a daemon thread, asleep
        between checks (at most 1 s late), that ends when no stage is open (start makes another)."""
        while True:
            time.sleep(min(1.0, self.every_s / 10))
            with self._lock:
                open_stages = list(self._stages.items())
                if not open_stages:
                    self._ticker = None
                    return
            for name, state in open_stages:
                self._due(name, state)

    def finish(self, name):
        with self._lock:
            state = self._stages.pop(name, None)
        if state is not None:
            self._ended[name] = time.monotonic()
            self.line(f"{name}: {state['done']}/{state['total']} in {time.monotonic() - state['t0']:.1f} s")

    def stage_done(self, name: str, seconds: float, where: str = "") -> None:
        if self._ended.get(name, float("-inf")) >= time.monotonic() - seconds:  # its bar's end line said it
            return
        self.line(f"{where}{name}: done in {seconds:.1f} s")

    def print(self, renderable):
        self.console.print(renderable)
        self.file.flush()

    def stop(self) -> None:
        """Nothing to tear down (RichReporter stops its live display here)."""


def display_reporter(file=None) -> Reporter:
    """Live bars on a terminal, plain lines anywhere else."""
    from flywheel.reports.progress import RichReporter

    stream = file or sys.stdout
    return RichReporter(file) if stream.isatty() else LineReporter(stream)


def stage_done(name: str, seconds: float, where: str = "") -> None:
    """A stage without a progress bar ended: a line where lines are the display."""
    current = reporter()
    if isinstance(current, LineReporter):
        current.stage_done(name, seconds, where)


@contextlib.contextmanager
def lines_unless_shown():
    """Plain lines on stdout for a flow run outside the CLI (a Prefect worker's flow run, a
    notebook, a script), whose default reporter only logs and shows no stage; a display
    already set (the CLI's) is left alone."""
    current = reporter()
    if type(current) is not Reporter:
        yield current
        return
    lines = LineReporter(sys.stdout)
    set_reporter(lines)
    try:
        yield lines
    finally:
        set_reporter(current)
