"""The CLI's one error boundary: a user's mistake is one or two lines, never a traceback.

Exit codes (the same for every command):

- 0: the command did what it was asked.
- 1: the work failed, or a service it needs (an S3 store, a docker engine) did not answer.
- 2: usage or config: a flag, a config key or value, or a file, run or lake the command
  names is wrong; nothing was done. Typer's own usage errors exit 2 as well.

Commands raise `UsageProblem`, `Unavailable` or `WorkFailed` (or exceptions of the project's own that
already name what is wrong, mapped in `_known`); `FlywheelGroup.invoke` turns them into
the message, a hint and the exit code. Anything else is a bug: its traceback is shown,
with a note saying where the run's log is. Not here: the checks themselves (common.py
and the commands), or the wording of the project's own exceptions.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import typer
from typer.core import TyperGroup

_log: list[Path] = []  # the current run's log (set by common.live_display), for a bug's note


class CliError(Exception):
    """What is wrong (`message`) and what to do (`hint`); `code` is the exit code."""

    code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint


class UsageProblem(CliError):
    """The command, its config, or a file, run or lake it names is wrong (exit 2)."""

    code = 2


class Unavailable(CliError):
    """A service the work needs does not answer (exit 1)."""

    code = 1


class WorkFailed(CliError):
    """The work was refused or failed, for a reason its message names (exit 1)."""

    code = 1


S3_HINT = "is an S3 server answering there? `flywheel store serve` starts one; --s3-endpoint (store.endpoint) names it"


def note_log(path: Path | None) -> None:
    """The log the running command's libraries write to (kept after the command's display
    is gone: a bug's traceback reaches the boundary after that)."""
    _log[:] = [path] if path else []


def _known(exc: BaseException) -> CliError | None:
    """The project's own exceptions that already say what is wrong, as CLI errors."""
    from flywheel.storage.lake import LakeError

    from flywheel.environments.sandbox.base import SandboxUnavailable

    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, SandboxUnavailable):  # a subclass of RuntimeError: callers that caught that still do
        return Unavailable(str(exc), "`flywheel check` tests the sandbox without starting a run")
    if isinstance(exc, LakeError):
        text = str(exc)
        if text.startswith(
            "cannot reach"
        ):  # the store's own reason is pyarrow's many lines: its AWS code is enough
            head, _, detail = text.partition(": When")
            code = re.search(r"AWS Error (\w+)", detail)
            return Unavailable(f"{head} ({code.group(1) if code else detail.strip()[:120]})", S3_HINT)
        return WorkFailed(text)  # the lake refused the work (a newer schema, a held-out task): no retry helps
    return None


def show(error: CliError) -> None:
    typer.secho(error.message, fg="red", err=True)
    if error.hint:
        typer.echo(f"  {error.hint}", err=True)


class FlywheelGroup(TyperGroup):
    """The top-level command group; every command and sub-command runs inside `invoke`."""

    def invoke(self, ctx: click.Context):
        note_log(None)  # a command run before in this process (tests, a notebook) left its own
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # typer's own: usage errors (exit 2), typer.Exit, Ctrl-C
        except Exception as exc:
            error = _known(exc)
            if error is None:
                where = f"the run's log is {_log[0]}" if _log else "this command keeps no log of its own"
                exc.add_note(
                    f"flywheel: an unexpected error, a bug: please report it with this traceback ({where})."
                )
                raise
            show(error)
            raise typer.Exit(error.code) from None
