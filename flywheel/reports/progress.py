"""Progress for long stages: rich bars in a terminal, progress artifacts in Prefect.

Stages call `with stage("generate", total) as advance: ... advance(n)`. The CLI installs
a `RichReporter`; every reporter also keeps a Prefect progress artifact up to date when a
flow run is active, so the UI shows the same progress.
"""

from __future__ import annotations

import contextlib
import sys
import logging
from typing import Callable, Iterator

log = logging.getLogger("flywheel")


def _prefect_progress(name: str):
    """An `update(percent)` callable for a new progress artifact, a no-op outside a run."""
    try:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact
        from prefect.context import FlowRunContext, TaskRunContext

        if FlowRunContext.get() is None and TaskRunContext.get() is None:
            raise LookupError
        artifact_id = create_progress_artifact(progress=0.0, description=f"{name} progress")
        return lambda pct: update_progress_artifact(artifact_id=artifact_id, progress=pct)
    except Exception:
        return lambda pct: None


class Reporter:
    """Logs only: the default outside the CLI (Prefect shows progress artifacts)."""

    def start(self, name: str, total: int) -> Callable[[int], None]:
        return lambda n: None

    def finish(self, name: str) -> None:
        pass

    def print(self, renderable) -> None:
        log.info("%s", renderable)


class RichReporter(Reporter):
    def __init__(self, file=None) -> None:
        """`file`: where to draw (the terminal flywheel/run/console.py kept aside); default stdout."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        tty = (file or sys.stdout).isatty()
        self.console = Console(file=file, width=None if tty else 150)  # a log or pipe: wide, not 80
        self.progress = Progress(
            TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self.console, transient=False,
        )  # fmt: skip
        self.progress.start()
        self._tasks: dict[str, int] = {}

    def start(self, name, total):
        task_id = self.progress.add_task(name, total=total)
        self._tasks[name] = task_id
        return lambda n: self.progress.advance(task_id, n)

    def finish(self, name):
        task_id = self._tasks.pop(name, None)
        if task_id is not None:
            self.progress.update(task_id, completed=self.progress.tasks[task_id].total)

    def print(self, renderable):
        self.progress.console.print(renderable)

    def stop(self):
        self.progress.stop()


_reporter: Reporter = Reporter()


def set_reporter(reporter: Reporter) -> None:
    global _reporter
    _reporter = reporter


def reporter() -> Reporter:
    return _reporter


@contextlib.contextmanager
def stage(name: str, total: int) -> Iterator[Callable[[int], None]]:
    advance_bar = _reporter.start(name, total)
    update_artifact = _prefect_progress(name)
    done = 0

    def advance(n: int = 1) -> None:
        nonlocal done
        done += n
        advance_bar(n)
        update_artifact(min(100.0, 100.0 * done / max(1, total)))

    try:
        yield advance
    finally:
        _reporter.finish(name)
        update_artifact(100.0)
