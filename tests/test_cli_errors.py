"""A user's mistake on the command line is a line or two saying what is wrong and what to
do, never a traceback, with the documented exit code (0 success, 1 failed work or a
service that does not answer, 2 usage or config); a run or store that does not exist is
an error and nothing is created (issue 48, item 4). Also `flywheel check`,
`show-config --set/--describe`, `query --format` and the shared flags. No model runs:
lakes are synthetic (storage/synthetic.py), S3 is a closed loopback port."""

import csv
import io
import json
import socket
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from flywheel.cli import app
from flywheel.storage.lake import Lake
from flywheel.storage.synthetic import cycle_tables

STARTER = "examples/tasks/starter.jsonl"


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=200)


def said(result, code: int, *texts: str) -> None:
    """Exit `code`, each of `texts` in the output, in at most two lines, no traceback."""
    out = result.output
    assert result.exit_code == code, out
    assert all(t in out for t in texts), out
    assert "Traceback" not in out and len(out.strip().splitlines()) <= 2, out


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lake(tmp_path):
    """A lake holding one cycle of run `r`."""
    root = tmp_path / "lake"
    Lake(str(root)).commit_tables("r", 0, *cycle_tables("r", 0, 4))
    return root


# ---- config mistakes (exit 2) ---------------------------------------------------------------
def test_yaml_error_in_config_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cycles: [1\n")
    said(invoke("show-config", "--config", bad), 2, f"--config {bad} is not valid YAML", "line 2")
    said(invoke("run", "--config", bad), 2, "not valid YAML")


def test_yaml_error_in_set(tmp_path):
    said(
        invoke("show-config", "--set", "cycles=[1"),
        2,
        "--set cycles=[1: the value is not valid YAML",
        "quote",
    )
    said(invoke("run", "--set", "cycles=[1", "--set", f"runs_dir={tmp_path}"), 2, "--set cycles=[1")
    said(invoke("show-config", "--set", "cycles"), 2, "is not key=value")
    said(
        invoke("show-config", "--set", "cycles=abc"),
        2,
        "cycles: Input should be a valid integer",
        "(got 'abc')",
    )
    said(
        invoke("show-config", "--set", "trainer.learnig_rate=1"),
        2,
        "unknown key 'learnig_rate'",
        "--describe",
    )


def test_config_naming_a_directory_or_nothing(tmp_path):
    said(invoke("show-config", "--config", tmp_path), 2, f"--config {tmp_path} is a directory", "YAML file")
    said(invoke("domains", "--config", tmp_path / "nope.yaml"), 2, "nope.yaml: no such file")
    listed = tmp_path / "list.yaml"
    listed.write_text("- cycles\n")
    said(invoke("show-config", "--config", listed), 2, "holds a list, not a mapping")


def test_a_bad_value_in_a_config_file_is_one_line(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("trainer: {learnig_rate: 1.0e-5}\ncycles: many\n")
    said(invoke("show-config", "--config", recipe), 2, "trainer.learnig_rate: Extra inputs are not permitted",
         "cycles: Input should be a valid integer")  # fmt: skip


# ---- runs and lakes that are not there (exit 2, nothing created) ------------------------------
@pytest.mark.parametrize("command", [["query", "SELECT 1"], ["report"], ["store", "compact"]])
def test_a_run_that_does_not_exist_is_an_error_and_nothing_is_made(tmp_path, command):
    runs = tmp_path / "runs"
    said(invoke(*command, "--run-id", "nope", "--runs-dir", runs), 2, "no run nope under", "pass --store")
    assert not runs.exists()
    said(invoke(*command, "--run-id", "nope", "--store", tmp_path / "nolake"), 2, "no lake at")
    assert not (tmp_path / "nolake").exists()


def test_a_store_without_the_run_names_the_runs_it_has(lake):
    said(
        invoke("query", "SELECT 1", "--run-id", "nope", "--store", lake),
        2,
        "holds no run nope",
        "runs there: r",
    )
    said(invoke("compare", "--run-id", "nope", "--store", lake), 2, "holds no run nope")


def test_query_store_naming_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    said(invoke("query", "SELECT 1", "--store", tmp_path / "afile"), 2, "is a file, not a lake")
    said(invoke("query", "SELECT 1"), 2, "give --run-id", "--store")


def test_compare_with_a_version_that_is_no_version(lake):
    said(invoke("compare", "--run-id", "r", "--store", lake, "--a", "first"), 2, "--a first: not a version",
         "'best' or 'current'")  # fmt: skip
    said(invoke("export", "--run-id", "r", "--store", lake, "--version", "best", "--to", lake.parent / "out"), 2,
         "--version best: no evaluation of this run recorded a best version")  # fmt: skip
    assert not (lake.parent / "out").exists()


def test_ingest_of_a_file_it_cannot_read_makes_no_lake(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("some notes\n")
    said(
        invoke("ingest", notes, "--store", tmp_path / "lake"),
        2,
        f"not a log file ingest reads: {notes}",
        ".jsonl",
    )
    assert not (tmp_path / "lake").exists()


# ---- a store that does not answer (exit 1) --------------------------------------------------
def test_s3_not_answering_in_report_and_ingest(tmp_path):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    said(invoke("report", "--store", "s3://b/lake", "--s3-endpoint", endpoint), 1,
         f"cannot reach the S3 store s3://b/lake at endpoint {endpoint}", "flywheel store serve")  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    said(
        invoke("ingest", log, "--store", "s3://b/lake", "--s3-endpoint", endpoint),
        1,
        "cannot reach the S3 store",
    )


# ---- the process's own exit code and streams ------------------------------------------------
def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "flywheel.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)  # fmt: skip


def test_the_process_exits_2_on_a_config_mistake_with_one_line_on_stderr(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cycles: [1\n")
    res = cli("show-config", "--config", bad)
    assert res.returncode == 2 and res.stdout == "", res
    assert len(res.stderr.strip().splitlines()) == 1 and "not valid YAML" in res.stderr, res.stderr


def test_the_process_exits_1_when_the_store_does_not_answer(tmp_path):
    res = cli(
        "query",
        "SELECT 1",
        "--store",
        "s3://b/lake",
        "--s3-endpoint",
        f"127.0.0.1:{closed_port()}",
        cwd=tmp_path,
    )
    assert res.returncode == 1 and "cannot reach the S3 store" in res.stderr, res
    assert len(res.stderr.strip().splitlines()) == 2 and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()


def test_a_bug_keeps_its_traceback_with_a_note(monkeypatch):
    import flywheel.cli.show_config as show_config

    def broken(*_, **__):
        raise RuntimeError("boom")

    monkeypatch.setattr(show_config, "load_config", broken)
    result = CliRunner().invoke(app, ["show-config"])
    assert isinstance(result.exception, RuntimeError) and result.exit_code == 1
    assert any("a bug" in note for note in result.exception.__notes__)


# ---- flywheel check ---------------------------------------------------------------------------
def lines(result) -> dict[str, str]:
    """check's lines: name -> 'ok ...' or 'FAIL ...'."""
    out = {}
    for line in result.output.splitlines():
        status, _, rest = line.partition(" ")
        name, _, detail = rest.strip().partition("  ")
        out[name.strip()] = f"{status} {detail.strip()}"
    return out


def test_check_passes_a_good_config_and_creates_nothing(tmp_path):
    runs = tmp_path / "runs"
    result = invoke("check", "--set", f"runs_dir={runs}", "--set", f"sampler.domains=[file:{STARTER}]")
    got = lines(result)
    assert result.exit_code == 0, result.output
    assert [s.split()[0] for s in got.values()] == ["ok"] * 6, result.output
    assert set(got) == {"config", "model", "domains", "store", "sandbox", "task file"}
    assert "10 rows" in got["task file"] and "(created by the run)" in got["store"]
    assert not runs.exists()


def test_check_exits_2_on_a_config_problem_and_1_on_an_unavailable_resource(tmp_path):
    s3 = ["--set", "store.uri=s3://b/x", "--set", f"store.endpoint=http://127.0.0.1:{closed_port()}"]
    wrong = invoke("check", "--set", "sampler.domains=[nope]", "--set", "reward.functions=[nomod:fn]", *s3)
    got = lines(wrong)
    assert wrong.exit_code == 2, wrong.output
    assert got["domains"].startswith("FAIL unknown domain 'nope'") and got["reward functions"].startswith(
        "FAIL"
    )
    assert got["store"].startswith("FAIL cannot reach s3://b/x") and got["config"].startswith("ok")
    down = invoke("check", *s3)
    assert down.exit_code == 1 and lines(down)["store"].startswith("FAIL"), down.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("cycles: [1\n")
    result = invoke("check", "--config", bad)
    assert result.exit_code == 2 and lines(result)["config"].startswith("FAIL"), result.output
    (tmp_path / "afile").write_text("x")
    result = invoke("check", "--set", f"store.uri={tmp_path / 'afile'}", "--set", "model.path=/no/such/model")
    got = lines(result)
    assert result.exit_code == 2 and "is a file" in got["store"] and "no config.json" in got["model"], (
        result.output
    )


def test_check_says_when_the_docker_engine_does_not_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = invoke("check", "--set", "sandbox.backend=docker", "--set", f"runs_dir={tmp_path}")
    assert result.exit_code == 1 and lines(result)["sandbox"].startswith("FAIL docker:"), result.output


# ---- show-config --set / --describe ----------------------------------------------------------
def test_show_config_takes_set_and_describes_every_key():
    plain = invoke("show-config", "--set", "cycles=7", "--set", "sampler.domains=[code]")
    assert plain.exit_code == 0 and yaml.safe_load(plain.output)["cycles"] == 7, plain.output
    described = invoke("show-config", "--describe", "--set", "cycles=7", "--set", "sampler.domains=[code]")
    assert described.exit_code == 0, described.output
    assert yaml.safe_load(described.output) == yaml.safe_load(plain.output)  # comments only: the same YAML
    text = described.output.splitlines()
    at = text.index("run_id: ''")
    assert text[at - 1] == "# Empty: a new run. An existing id resumes that run."
    assert any(line.strip().startswith("# Samples per task (the GRPO group size)") for line in text)
    assert "# SFT on the domains' reference replies" in described.output  # a section's own docstring


# ---- query --format ----------------------------------------------------------------------------
WIDE_SQL = (
    "SELECT 'x' || repeat('y', 200) AS wide, 1.5 AS n, 'nan'::DOUBLE AS z, count(*) AS rows FROM trajectories"
)


def test_query_formats(lake):
    args = ["query", WIDE_SQL, "--store", lake, "--format"]
    rows = list(csv.reader(io.StringIO(invoke(*args, "csv").output)))
    assert rows[0] == ["wide", "n", "z", "rows"] and len(rows[1][0]) == 201 and rows[1][3] == "16"
    data = json.loads(invoke(*args, "json").output)
    assert data == [{"wide": "x" + "y" * 200, "n": 1.5, "z": None, "rows": 16}]
    md = invoke(*args, "markdown").output.splitlines()
    assert md[:2] == ["| wide | n | z | rows |", "|---|---|---|---|"] and md[2].endswith("| 1.5 | nan | 16 |")
    table = invoke(*args, "table")
    assert table.exit_code == 0 and "…" in table.output and "y" * 200 not in table.output, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 200
    said(invoke(*args, "xml"), 2, "--format xml: not a format", "csv")
    said(
        invoke("query", "SELECT nope FROM trajectories", "--store", lake), 2, "query failed", "the views are"
    )


# ---- the same flags mean the same thing everywhere --------------------------------------------
def test_shared_flags_are_one_option_on_every_command():
    import typer

    def commands(cmd, path=()):
        # duck-typed: typer bundles its own click, so isinstance(cmd, click.Group) never holds
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from commands(sub, (*path, name))
        else:
            yield " ".join(path), cmd

    helps: dict[str, set] = {}
    for name, cmd in commands(typer.main.get_command(app)):
        flags = {opt: p for p in cmd.params for opt in p.opts}
        for flag in ("--store", "--s3-endpoint", "--runs-dir", "--config"):
            if flag in flags:
                helps.setdefault(flag, set()).add(flags[flag].help)
        if "--run-id" in flags:  # a command that names a run says where its lake and config are
            assert {"--store", "--s3-endpoint", "--runs-dir", "--config", "--set"} <= set(flags), name
        if "--set" in flags:
            assert flags["--set"].multiple and flags["--set"].help.startswith("Override a config key"), name
    assert all(len(h) == 1 for h in helps.values()), helps


def test_a_sandbox_that_cannot_run_here_is_one_line_and_exit_1(tmp_path):
    """`flywheel run` with a sandbox that cannot start (its python missing; bubblewrap
    missing goes the same way) says so in a line, with what to do, and exits 1: no
    traceback, no engine started."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "flywheel.cli", "run", "--cycles", "1",
                          "--set", "sandbox.python=/nonexistent/python3", "--set", f"runs_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "sandbox python '/nonexistent/python3' does not exist" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
