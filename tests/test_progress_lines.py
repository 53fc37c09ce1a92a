"""Progress when stdout is not a terminal (flywheel/reports/progress_lines.py): one time-stamped,
flushed line per stage start and end, readable from a pipe while the writer still runs;
and a real `flywheel ingest` whose stdout is a pipe prints its stage as lines, not bars."""

import os
import select
import subprocess
import sys
import time

from flywheel.reports.progress import Reporter, set_reporter, stage
from flywheel.reports.progress_lines import LineReporter, display_reporter, lines_unless_shown, stage_done


def _read_now(fd: int) -> str:
    """What the pipe holds now, without waiting for the writer to close it."""
    ready, _, _ = select.select([fd], [], [], 2.0)
    return os.read(fd, 65536).decode() if ready else ""


def test_each_line_reaches_the_pipe_as_it_happens():
    from rich.table import Table

    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w") as writer:
        lines = LineReporter(writer, every_s=0.0)
        set_reporter(lines)
        try:
            assert isinstance(display_reporter(writer), LineReporter)  # a pipe is not a terminal
            with stage("generate", total=4) as advance:
                assert "generate: started, 4 to do" in _read_now(read_fd)  # flushed at once
                advance(2)
                assert "generate: 2/4 after" in _read_now(read_fd)
                advance(2)
            assert "generate: 4/4 in" in _read_now(read_fd)
            stage_done("generate", 5.0, "cycle 0 ")  # its bar's end line said it already
            stage_done("update", 31.25, "cycle 0 ")  # no bar: a line of its own
            text = _read_now(read_fd)
            assert "generate" not in text and "cycle 0 update: done in 31.2 s" in text
            table = Table("stage", "seconds")
            table.add_row("update", "31.2")
            lines.print(table)
            text = _read_now(read_fd)
            assert "update" in text and "\x1b[" not in text  # plain text, no colour or cursor codes
        finally:
            set_reporter(Reporter())
    os.close(read_fd)


def test_a_stage_whose_count_does_not_move_still_shows_it_runs():
    """An evaluation hands vLLM every prompt in one call: its count moves only at the end, and
    lines that waited for the count said nothing for minutes. The lines while a stage runs come
    on their own, and stop when it ends."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w") as writer:
        lines = LineReporter(writer, every_s=0.3)
        advance = lines.start("generate", 296)
        time.sleep(1.5)
        text = _read_now(read_fd)
        assert text.count("generate: 0/296 after") >= 2, text
        advance(296)
        lines.finish("generate")
        assert "generate: 296/296 in" in _read_now(read_fd)
        time.sleep(1.5)
        assert not select.select([read_fd], [], [], 0)[0]  # nothing after the end
        assert lines._ticker is None  # its thread ended with the last open stage
    os.close(read_fd)


def test_a_line_carries_the_time_it_was_written(capsys):
    LineReporter(sys.stdout).line("sample: done in 0.1 s")
    stamp, rest = capsys.readouterr().out.split(" ", 1)
    assert rest == "sample: done in 0.1 s\n" and time.strptime(stamp, "%H:%M:%S")


def test_a_real_cli_run_on_a_pipe_prints_stage_lines(tmp_path):
    from tests.test_ingest import blueprint, write_jsonl

    path = write_jsonl(tmp_path / "log.jsonl", [blueprint(i) for i in range(3)])
    env = {**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90"}
    env.pop("PREFECT_API_URL", None)
    command = [sys.executable, "-m", "flywheel.cli", "ingest", path, "--store", str(tmp_path / "lake")]
    proc = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "ingest: started" in out and "ingest: 3/3 in" in out, out
    assert out.index("ingest: 3/3 in") < out.index("traces ingested into")  # before the summary table
    assert "\x1b[" not in out  # no colour or cursor codes
    bars = [line for line in out.splitlines() if line.lstrip().startswith("ingest") and "━" in line]
    assert not bars


def test_a_flow_outside_the_cli_gets_lines_and_the_cli_keeps_its_display():
    from flywheel.reports.progress import reporter

    set_reporter(Reporter())  # what a Prefect worker's or a notebook's flow run starts with
    with lines_unless_shown() as shown:
        assert isinstance(reporter(), LineReporter) and shown is reporter()
    assert type(reporter()) is Reporter  # restored
    cli = LineReporter(sys.stderr)  # a display the CLI set
    set_reporter(cli)
    try:
        with lines_unless_shown() as shown:
            assert shown is cli and reporter() is cli
    finally:
        set_reporter(Reporter())
