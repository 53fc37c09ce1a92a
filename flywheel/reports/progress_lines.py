"""Progress as plain lines, for an output that is not a terminal (CI, nohup, a Prefect
worker's log, a notebook's captured stdout).

rich's live bars (flywheel/reports/progress.py's RichReporter) redraw in place on a terminal; on
a pipe or file rich draws nothing until the display stops, so a two-hour run showed
nothing until its end. `LineReporter` writes one time-stamped line when a stage starts,
one every `every_s` seconds while it runs, and one when it ends with its count and
seconds, each flushed at once. `stage_done` reports the cycle's stages that have no
progress bar (sample, archive, update, replay: flows/flywheel.py). `display_reporter`
picks the reporter for a stream; `lines_unless_shown` gives a flow run outside the CLI
(a Prefect worker, a notebook) lines on its stdout.

What it does not do: colours, cursor movement or redrawing; it never reads the terminal
size (tables render 150 wide).
"""

from __future__ import annotations

import contextlib
import sys
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

    def line(self, text: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
        try:
            self.file.write(f"{stamp} {text}\n")
            self.file.flush()
        except (ValueError, OSError):  # the stream was closed under us: progress never fails a run
            pass

    def start(self, name, total):
        state = {"t0": time.monotonic(), "last": time.monotonic(), "done": 0, "total": total}
        self._stages[name] = state
        self.line(f"{name}: started, {total} to do")

        def advance(n: int) -> None:
            state["done"] += n
            now = time.monotonic()
            if now - state["last"] >= self.every_s:
                state["last"] = now
                self.line(f"{name}: {state['done']}/{state['total']} after {now - state['t0']:.0f} s")

        return advance

    def finish(self, name):
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
