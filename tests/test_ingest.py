"""Production traces in: scrubbing, the record shapes, bad input quarantined, exactly once,
on a local lake and on a real S3 server (SeaweedFS), and through the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from flywheel.flows.ingest import ingest_file
from flywheel.config import IngestConfig
from flywheel.production.logs import RecordError, parse_record
from flywheel.production.scrub import ScrubError, Scrubber
from flywheel.storage.lake import Lake
from flywheel.storage.traces import TraceStore

SECRETS = ["sk-proj-a1B2c3D4e5F6g7H8i9J0kLmN", "AKIAIOSFODNN7EXAMPLE", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
           "jane.doe@example.com", "+1 415-555-0132", "hunter2hunter2"]  # fmt: skip


def blueprint(i: int, wrong: bool = False, **extra) -> dict:
    """A Data Flywheel Blueprint record: an extraction request and its logged response."""
    total = 100 + i
    return {
        "timestamp": 1764633600 + i, "workload_id": "invoices", "client_id": "acme",
        "request": {"model": "prod-model", "temperature": 0.2, "messages": [
            {"role": "system", "content": "Extract the total as JSON: {\"total\": <number>}."},
            {"role": "user", "content": f"Invoice {i}. Total due: {total} EUR. Questions: jane.doe@example.com"}]},
        "response": {"id": f"r{i}", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": json.dumps({"total": total + (7 if wrong else 0)})}}]},
        "feedback": {"rating": "down" if wrong else "up", **({"corrected_answer": {"total": total}} if wrong else {})},
        **extra,
    }  # fmt: skip


def write_jsonl(path: Path, records: list, raw_lines: list[bytes] = ()) -> str:
    with open(path, "wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")
        for line in raw_lines:
            f.write(line + b"\n")
    return str(path)


def test_scrubber_finds_secrets_and_leaves_figures_alone():
    s, counts = Scrubber(), Counter()
    text = (f"key {SECRETS[0]} aws {SECRETS[1]} gh {SECRETS[2]} mail {SECRETS[3]} call {SECRETS[4]} "
            f"password={SECRETS[5]} Authorization: Bearer abcdefghijklmnop1234 card 4111 1111 1111 1111")  # fmt: skip
    out = s.scrub(text, counts)
    assert (
        not any(secret in out for secret in SECRETS)
        and "4111" not in out
        and "abcdefghijklmnop1234" not in out
    )
    assert "password=[REDACTED:secret]" in out  # the key's name stays: the text still reads
    assert counts == {"api_key": 1, "aws_access_key": 1, "github_token": 1, "email": 1, "phone": 1, "secret": 1,
                      "bearer": 1, "card": 1}  # fmt: skip
    plain = "Invoice 2024-11-30 #88213, total 1,250.00 EUR, order 1234567890123, qty 12"
    assert s.scrub(plain, Counter()) == plain  # dates, totals and ids that fail Luhn stay
    custom = Scrubber({"ticket": r"TCK-\d+"}, defaults=False)
    assert custom.scrub("see TCK-991 by a@b.co", Counter()) == "see [REDACTED:ticket] by a@b.co"
    with pytest.raises(ScrubError, match="'bad'"):
        Scrubber({"bad": "(unclosed"})


def test_record_shapes_and_tool_calls():
    s = Scrubber()
    t = parse_record(blueprint(1, wrong=True), s, Counter())
    assert t["workload_id"] == "invoices" and t["client_id"] == "acme" and t["rating"] == 0.0
    assert t["corrected"] == '{"total": 101}' and json.loads(t["request_json"]) == {
        "model": "prod-model",
        "temperature": 0.2,
    }
    assert "[REDACTED:email]" in t["messages"][1]["content"] and t["timestamp"].year == 2025
    bare = {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]}],
            "tools": [{"type": "function", "function": {"name": "weather"}}], "rating": True}  # fmt: skip
    t = parse_record(bare, s, Counter(), default_workload="chat")
    assert t["workload_id"] == "chat" and t["messages"][0]["role"] == "system" and t["rating"] == 1.0
    assert t["response"]["tool_calls"] == [{"id": "c1", "name": "weather", "arguments": '{"city": "Oslo"}'}]
    parts = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]
    }
    assert parse_record(parts, s, Counter())["messages"][0]["content"] == "ab"
    # the same content is the same trace, whatever else the record says
    assert parse_record(blueprint(2), s, Counter())["trace_id"] == parse_record(
        blueprint(2, timestamp=1), s, Counter())["trace_id"]  # fmt: skip


@pytest.mark.parametrize("record, reason", [
    ({"request": {"messages": []}}, "no messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "unknown role 'robot'"),
    ({"messages": [{"role": "user", "content": "x" * 200_001}]}, "over the limit"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": "{not json"}}]}]}, "arguments do not parse as JSON"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "unsupported content part"),
    ({"messages": [{"role": "system", "content": "s"}]}, "no user message"),
    ({"messages": [{"role": "user", "content": "q"}], "rating": "meh"}, "rating 'meh'"),
    ({"messages": [{"role": "user", "content": "q"}], "timestamp": "yesterday"}, "timestamp"),
])  # fmt: skip
def test_bad_records_are_refused_with_a_reason(record, reason):
    with pytest.raises(RecordError, match=reason):
        parse_record(record, Scrubber(), Counter(), max_chars=200_000)


def test_ingest_exactly_once_scrubbed_with_quarantine(tmp_path):
    store = TraceStore(Lake(str(tmp_path / "lake")))
    cfg = IngestConfig(max_message_chars=1000)
    good = [blueprint(i, wrong=i % 3 == 0) for i in range(9)]
    secret = {"messages": [{"role": "user", "content": f"my key is {SECRETS[0]}, mail {SECRETS[3]}"},
                           {"role": "assistant", "content": "noted"}]}  # fmt: skip
    bad = [b"not json {", json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode(),
           json.dumps({"messages": [{"role": "user", "content": SECRETS[0] + " " + "y" * 5000}]}).encode(),
           b'{"messages": [{"role": "user", "content": "\xff"}]}', b"[1, 2]"]  # fmt: skip
    path = write_jsonl(tmp_path / "day1.jsonl", [*good, good[0], secret], bad)
    report = ingest_file(store, path, cfg, workload="chat")
    assert (report.records, report.new, report.duplicates, report.quarantined) == (16, 10, 1, 5)
    assert report.workloads == {"invoices": 9, "chat": 1} and report.redactions["api_key"] == 2
    assert sorted(report.reasons) == sorted(["not JSON (Expecting value: line N column N (char N))",
                                             "message N: unknown role '...'", "message N: N characters, over the limit of N",
                                             "not UTF-8 (invalid start byte at byte N)", "not a JSON object"])  # fmt: skip
    quarantined = store.quarantine(report.batch)
    assert [q["where"] for q in quarantined] == ["line 12", "line 13", "line 14", "line 15", "line 16"]
    assert all(q["file"] == path for q in quarantined)
    # records are JSON text, never Python reprs: the unknown role's reads back; the long one is cut
    assert json.loads(quarantined[1]["record"]) == {"messages": [{"role": "robot", "content": "x"}]}
    assert (
        quarantined[2]["record_cut"] and not quarantined[1]["record_cut"] and quarantined[0]["record"] == ""
    )
    # nothing written anywhere in the lake holds a secret, the quarantine included
    written = b"".join(p.read_bytes() for p in (tmp_path / "lake").rglob("*") if p.is_file())
    assert not any(s.encode() in written for s in SECRETS[:4])
    table = store.traces()
    assert table.num_rows == 10 and len(set(table["trace_id"].to_pylist())) == 10
    # the same file again: nothing read, nothing added; another file overlapping it: only the new
    again = ingest_file(store, path, cfg, workload="chat")
    assert again.already_ingested and again.new == 0 and store.traces().num_rows == 10
    day2 = write_jsonl(tmp_path / "day2.jsonl", [*good[:5], blueprint(20), blueprint(21)])
    report2 = ingest_file(store, day2, cfg)
    assert (report2.new, report2.duplicates) == (2, 5) and store.traces().num_rows == 12
    assert store.traces("invoices").num_rows == 11 and store.workloads() == ["chat", "invoices"]


def test_a_killed_ingest_leaves_nothing_visible_and_reruns(tmp_path, monkeypatch):
    store = TraceStore(Lake(str(tmp_path / "lake")))
    path = write_jsonl(tmp_path / "log.jsonl", [blueprint(i) for i in range(4)])
    real_write = store.lake._write_bytes

    def die_on_marker(p, data):
        if "/_traces/" in p:
            raise KeyboardInterrupt  # killed between the data and the marker
        real_write(p, data)

    monkeypatch.setattr(store.lake, "_write_bytes", die_on_marker)
    with pytest.raises(KeyboardInterrupt):
        ingest_file(store, path, IngestConfig())
    assert store.traces().num_rows == 0 and list((tmp_path / "lake" / "traces").rglob("*.parquet"))
    monkeypatch.setattr(store.lake, "_write_bytes", real_write)
    report = ingest_file(store, path, IngestConfig())
    assert report.new == 4 and store.traces().num_rows == 4
    assert (
        len(list((tmp_path / "lake" / "traces").rglob("*.parquet"))) == 1
    )  # the partial files were replaced


def test_ingest_parquet_into_s3(seaweedfs, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [blueprint(i) for i in range(6)]
    for r in rows:  # Parquet wants one type per column: nested objects as they are
        r["response"]["choices"][0]["message"]["tool_calls"] = None
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "log.parquet")
    store = TraceStore(Lake("s3://flywheel-test/traces-unit", endpoint=seaweedfs))
    report = ingest_file(store, str(tmp_path / "log.parquet"), IngestConfig())
    assert (report.records, report.new, report.quarantined) == (6, 6, 0)
    assert ingest_file(store, str(tmp_path / "log.parquet"), IngestConfig()).already_ingested
    assert TraceStore(Lake("s3://flywheel-test/traces-unit", endpoint=seaweedfs)).traces().num_rows == 6


def test_cli_ingest_reports_and_refuses_bad_input(prefect_server, tmp_path):
    from typer.testing import CliRunner

    from flywheel.cli import app

    path = write_jsonl(tmp_path / "log.jsonl", [blueprint(i) for i in range(3)], [b"oops"])
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", path, "--store", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    assert "quarantined 1: not JSON" in result.output and "invoices 3" in result.output
    # a drop dir: each log file in it, the one ingested before adding nothing
    write_jsonl(tmp_path / "later.jsonl", [blueprint(i) for i in range(5)])
    (tmp_path / "notes.txt").write_text("not a log")
    again = runner.invoke(app, ["ingest", str(tmp_path), "--store", str(tmp_path / "lake")])
    assert again.exit_code == 0 and "log.jsonl: ingested before" in again.output
    assert TraceStore(Lake(str(tmp_path / "lake"))).traces().num_rows == 5
    missing = runner.invoke(app, ["ingest", str(tmp_path / "nope.jsonl"), "--store", str(tmp_path / "lake")])
    assert missing.exit_code == 2 and "nope.jsonl" in missing.output
    bad = runner.invoke(
        app, ["ingest", path, "--store", str(tmp_path / "lake"), "--set", "ingest.scrub_patterns={x: '('}"]
    )
    assert bad.exit_code == 2 and "'x' is not a valid regular expression" in bad.output


def test_cli_ingest_into_a_runs_own_lake(prefect_server, tmp_path):
    """The README's production quick-start: `flywheel ingest FILE --run-id prod` puts the traces
    in runs/prod/lake, the lake `flywheel run --run-id prod` reads; with neither a run id nor a
    store it is a usage error naming both."""
    from typer.testing import CliRunner

    from flywheel.cli import app
    from flywheel.config import FlywheelConfig

    path = write_jsonl(tmp_path / "log.jsonl", [blueprint(i) for i in range(3)])
    runner = CliRunner()
    runs = f"runs_dir={tmp_path / 'runs'}"
    result = runner.invoke(app, ["ingest", path, "--run-id", "prod", "--set", runs])
    assert result.exit_code == 0, result.output
    lake = FlywheelConfig(run_id="prod", runs_dir=str(tmp_path / "runs")).lake_uri
    assert lake.startswith(str(tmp_path / "runs")) and TraceStore(Lake(lake)).traces().num_rows == 3
    neither = runner.invoke(app, ["ingest", path, "--set", runs])
    assert neither.exit_code == 2 and "--run-id" in neither.output and "--store" in neither.output


def test_cli_ingest_without_a_prefect_server_starts_none(tmp_path):
    """No PREFECT_API_URL: `flywheel ingest` runs the flow's body without Prefect (no
    temporary server to wait for), and the traces land exactly once as with a server."""
    import os
    import subprocess
    import sys

    path = write_jsonl(tmp_path / "log.jsonl", [blueprint(i) for i in range(3)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # a profile naming a server would not do
    cmd = [sys.executable, "-m", "flywheel.cli", "ingest", path, "--store", str(tmp_path / "lake")]
    for _ in range(2):  # the second adds nothing
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "temporary server" not in (out.stdout + out.stderr).lower()
    assert TraceStore(Lake(str(tmp_path / "lake"))).traces().num_rows == 3
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()  # no server's database was made


def test_traces_are_a_view_in_query(tmp_path):
    """Ingested traces are readable with SQL beside the runs' views (`flywheel query`'s
    connection), committed batches only, every workload."""
    from flywheel.storage.query import connect

    lake = Lake(str(tmp_path / "lake"))
    assert connect(lake).execute("SELECT count(*) FROM traces").fetchone() == (0,)
    ingest_file(
        TraceStore(lake), write_jsonl(tmp_path / "a.jsonl", [blueprint(i) for i in range(4)]), IngestConfig()
    )
    rows = connect(lake).execute("SELECT workload_id, count(*) FROM traces GROUP BY ALL").fetchall()
    assert rows == [("invoices", 4)]
