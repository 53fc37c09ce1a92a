"""Zero signal said plainly (flywheel/reports/zero_signal.py) over a real local lake: a domain whose
samples all scored 0, a task file whose samples all scored 1, a domain whose groups were
mostly flat, and one with signal (no note); the likely cause read from the failures."""

import dataclasses

from typer.testing import CliRunner

from flywheel.environments import get_environment
from flywheel.reports.zero_signal import _cycles, notes, signal_rows
from flywheel.storage.lake import Lake
from flywheel.storage.query import connect
from tests.test_lake import make_trajectories

RUN = "zs"


def _lake(tmp_path) -> Lake:
    """Cycle 0: code all 0 with no answer in the format; a task file all 1; data mostly
    flat (3 of 4 groups), extraction with signal. Cycle 1: the task file all 1 again, code
    failing at the length limit."""
    lake = Lake(str(tmp_path / "lake"))
    code = get_environment("code").make_tasks("train", 1, 0, 3)
    data = get_environment("data").make_tasks("train", 1, 0, 4)
    extraction = get_environment("extraction").make_tasks("train", 1, 0, 2)
    file_tasks = [dataclasses.replace(t, domain="file:my.jsonl", task_id=t.task_id + "f") for t in code[:2]]
    rows = {t.task_id: [0.0] * 4 for t in code}
    rows |= {t.task_id: [1.0] * 4 for t in file_tasks}
    rows |= dict(zip([t.task_id for t in data], [[0.0] * 4, [0.0] * 4, [1.0] * 4, [0.0, 1.0, 0.0, 0.0]]))
    rows |= {t.task_id: [0.0, 1.0, 1.0, 0.0] for t in extraction}
    trajs = []
    for tasks, verdict in ((code, "no_code"), (file_tasks, None), (data, None), (extraction, None)):
        batch = make_trajectories(RUN, 0, tasks, rows, k=4)
        for tr in batch:
            tr.verdict = verdict or ("pass" if tr.reward >= 1 else "fail")
        trajs += batch
    lake.commit_cycle(RUN, 0, code + file_tasks + data + extraction, trajs)
    later = make_trajectories(RUN, 1, code + file_tasks, rows, k=4)
    for tr in later:
        tr.verdict, tr.finish_reason = ("pass", "stop") if tr.reward >= 1 else ("fail", "length")
    lake.commit_cycle(RUN, 1, code + file_tasks, later)
    return lake


def test_each_kind_of_missing_signal_gets_its_line_and_cause(tmp_path):
    lake = _lake(tmp_path)
    con = connect(lake, RUN)
    said = notes(signal_rows(con))
    by_domain = {line.split(":")[0].removeprefix("no GRPO signal from "): line for line in said}
    assert len(said) == 3, said  # code (both cycles: one kind), the file, data; not extraction
    code_lines = [line for line in said if line.startswith("no GRPO signal from code:")]
    assert len(code_lines) == 1 and "every sample scored 0 in cycles 0-1 (24 samples)" in code_lines[0]
    file_line = next(line for line in said if "file:my.jsonl" in line)
    assert "every sample scored 1 in cycles 0-1 (16 samples)" in file_line and "too easy" in file_line
    assert "higher levels" in file_line
    data_line = by_domain["data"]
    assert "3 of 4 groups had equal rewards in cycle 0 (2 all failed, 1 all passed" in data_line
    assert "cold_start.references" in data_line and "generation.k" in data_line
    assert not any("extraction" in line for line in said)


def test_the_cause_follows_the_failed_samples_evidence(tmp_path):
    lake = _lake(tmp_path)
    con = connect(lake, RUN)
    cycle0 = " ".join(notes(signal_rows(con, 0)))
    cycle1 = " ".join(notes(signal_rows(con, 1)))
    assert "every sample scored 0 in cycle 0" in cycle0 and "answer format: 100% of the failed" in cycle0
    assert "every sample scored 0 in cycle 1" in cycle1 and "cut at generation.max_tokens" in cycle1
    data = [n for n in notes(signal_rows(con, 0)) if n.startswith("no GRPO signal from data")]
    assert len(data) == 1 and "too hard" in data[0]


def test_flywheel_report_says_it_after_its_table(tmp_path):
    from flywheel.cli import app

    _lake(tmp_path)
    args = ["report", "--run-id", RUN, "--store", str(tmp_path / "lake"), "--by", "domain"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "no GRPO signal from file:my.jsonl" in res.output.replace("\n", " ")


def test_cycle_ranges_read_plainly():
    assert _cycles([3]) == "cycle 3" and _cycles([5, 0, 1, 2]) == "cycles 0-2, 5"
