"""`flywheel --version` prints the installed distribution's version and exits 0 before any
command runs (issue 48, item 4)."""

from importlib.metadata import version

from typer.testing import CliRunner

import flywheel
from flywheel.cli import app


def test_version_prints_the_installed_version_and_exits_zero():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"flywheel {version(flywheel.DISTRIBUTION)}"


def test_commands_still_run_after_the_callback():
    result = CliRunner().invoke(app, ["domains"])
    assert result.exit_code == 0, result.output
    assert "code" in result.output and "sandbox" in result.output
