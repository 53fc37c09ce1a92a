"""Bad input never takes a file down (issue 41, item 2): each kind of damage, made on a real
file (deep nesting, lone surrogates, a BOM, numbers no float holds, a cut gzip, flipped
bytes in a Parquet row group, binary Parquet values), becomes a quarantined row naming
its file and line or row, or one clear error naming the file, and the good rows beside it
are kept: in a task file (environments/sources/task_rows.py) and in trace ingest (flows/ingest.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flywheel.environments.sources.task_file import FileTasks, TaskFileError
from flywheel.environments.sources.task_rows import MAX_DEPTH, read_rows
from flywheel.flows.ingest import count_records, ingest_file
from flywheel.config import IngestConfig
from flywheel.storage.lake import Lake
from flywheel.storage.traces import TraceStore


def good(i: int) -> dict:
    return {"id": f"g{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)}


def kept_ids(env: FileTasks) -> set[str]:
    return {r.key for rows in env.cells.values() for r in rows}


def reasons(env: FileTasks) -> dict[str, str]:
    return {q["where"]: q["reason"] for q in env.quarantined}


def test_jsonl_bom_nesting_surrogates_and_huge_numbers(tmp_path):
    deep = b'{"prompt": "deep", "answer": "1", "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    medium = (
        b'{"prompt": "medium", "answer": "1", "x": ' + b"[" * 100 + b"]" * 100 + b"}"
    )  # decodes, over MAX_DEPTH
    lines = [
        b"\xef\xbb\xbf" + json.dumps(good(1)).encode(),  # a BOM before the first row
        deep,
        json.dumps(good(2)).encode(),
        b'{"prompt": "lone \\ud800 here", "answer": "1"}',  # the escape a JSON writer emits for a lone surrogate
        b'{"prompt": [{"role": "user", "content": "ok"}], "answer": "1", "notes": {"a": ["\\udfff"]}}',
        medium,
        b'{"prompt": "big", "answer": 1e400}',
        b'{"prompt": "bigger", "answer": ' + b"9" * 400 + b"}",
        b'{"prompt": "in text", "answer": "1e400", "verifier": "numeric"}',
        b'{"prompt": "fields", "answer": {"total": ' + b"7" * 400 + b"}}",
        json.dumps(good(3)).encode(),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    env = FileTasks(str(path))
    assert kept_ids(env) == {"g1", "g2", "g3"}  # the BOM row read, the good rows around the bad ones kept
    why = reasons(env)
    assert set(why) == {f"line {n}" for n in (2, 4, 5, 6, 7, 8, 9, 10)}
    assert why["line 2"] == f"nested deeper than {MAX_DEPTH} levels"
    assert why["line 4"].startswith("lone surrogate in field prompt")
    assert why["line 5"].startswith("lone surrogate in field notes.a[0]")
    assert why["line 6"].startswith(f"nested deeper than {MAX_DEPTH} levels (at x")
    assert why["line 7"] == "answer is inf"
    assert "beyond the range of a float" in why["line 8"]
    # "1e400" as text: refused by the number reader itself (environments/verifiers/answers.py) or by the range check
    assert why["line 9"].startswith(
        ("answer '1e400' is beyond", "verifier numeric needs a number, not '1e400'")
    )
    assert why["line 10"] == "answer.total is a number beyond the range of a float"
    assert all(q["file"] == str(path) for q in env.quarantined)
    # what the quarantine keeps can be written as UTF-8 (the lone surrogate never reaches a writer)
    json.dumps(env.quarantined, ensure_ascii=False).encode("utf-8")


def test_a_truncated_gzip_keeps_the_rows_before_the_cut(tmp_path):
    rows = [good(i) | {"pad": "p" * 200} for i in range(400)]
    data = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    out = list(read_rows(str(path)))
    assert out[-1][1] is None and out[-1][2].startswith("truncated gzip")
    read = [r for _, r, e in out if not e]
    assert 0 < len(read) < 400 and read == [r for r in rows[: len(read)]]  # a prefix, nothing skipped
    assert out[-1][0] == f"line {len(read) + 1}"
    env = FileTasks(str(path))
    assert env.rows == len(read) and list(reasons(env)) == [f"line {len(read) + 1}"]
    # a gzip whose bytes are not gzip at all: one quarantined entry, and the file named at start-up
    bad = tmp_path / "garbage.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    with pytest.raises(TaskFileError, match=r"garbage\.jsonl\.gz has no usable row .*line 1: truncated gzip"):
        FileTasks(str(bad))


def flip_row_group(path: Path, group: int) -> None:
    """Flip 8 bytes in the middle of row group `group`'s first column chunk."""
    chunk = pq.ParquetFile(path).metadata.row_group(group).column(0)
    data = bytearray(path.read_bytes())
    start = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[start : start + 8] = bytes(b ^ 0xFF for b in data[start : start + 8])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("checksums", [False, True])
def test_a_corrupt_parquet_row_group_is_quarantined_and_the_others_kept(tmp_path, checksums):
    rows = [good(i) | {"pad": f"row {i} " * 10} for i in range(30)]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=10, write_page_checksum=checksums)
    flip_row_group(path, 1)
    env = FileTasks(str(path))
    assert kept_ids(env) == {f"g{i}" for i in [*range(10), *range(20, 30)]}
    [(where, why)] = reasons(env).items()
    assert where == "row group 1 (rows 11-20)" and why.startswith("row group does not decode")
    # a file cut in half has no footer: one clear error naming it
    half = tmp_path / "half.parquet"
    half.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert count_records(str(half)) == 0
    with pytest.raises(
        TaskFileError, match=r"half\.parquet has no usable row .*half\.parquet: not a readable Parquet file"
    ):
        FileTasks(str(half))


def test_binary_parquet_values_are_text_when_they_are_utf8(tmp_path):
    table = pa.table({
        "id": ["a", "b", "c"],
        "prompt": pa.array(["Capital of France?".encode(), b"\xff\xfe not text", "Hauptstadt? \u00e4".encode()], pa.binary()),
        "answer": pa.array([b"Paris", b"x", b"Berlin"], pa.binary()),
    })  # fmt: skip
    path = tmp_path / "bin.parquet"
    pq.write_table(table, path)
    env = FileTasks(str(path))
    assert kept_ids(env) == {"a", "c"}
    assert reasons(env) == {"row 2": "binary value in field prompt: not UTF-8 text"}
    [task] = [
        t for s in ("train", "eval") for t in env.all_tasks(s) if json.loads(t.setup_json)["row_id"] == "a"
    ]
    assert (
        task.prompt[-1]["content"] == "Capital of France?"
        and json.loads(task.verifier_json)["answer"] == "Paris"
    )


def test_ingest_keeps_the_good_records_beside_bad_bytes(tmp_path):
    """Trace ingest reads through the same read_rows: a cut gzip and a surrogate row are
    quarantined in the lake's quarantine with file and line, the rest committed."""
    record = lambda i: {"messages": [{"role": "user", "content": f"hello {i}"},  # noqa: E731
                                     {"role": "assistant", "content": f"hi {i}"}]}  # fmt: skip
    lines = [json.dumps(record(i)).encode() for i in range(300)]
    lines[5] = (
        b'{"messages": [{"role": "user", "content": "\\ud83d"}, {"role": "assistant", "content": "x"}]}'
    )
    lines[6] = b"[" * 5000 + b"]" * 5000
    data = gzip.compress(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    path = tmp_path / "logs.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    store = TraceStore(Lake(str(tmp_path / "lake")))
    report = ingest_file(store, str(path), IngestConfig())
    quarantined = store.quarantine(report.batch)
    assert [q["where"] for q in quarantined[:2]] == ["line 6", "line 7"]
    assert "lone surrogate in field messages[0].content" in quarantined[0]["reason"]
    assert "nested deeper than" in quarantined[1]["reason"]
    assert quarantined[-1]["reason"].startswith("truncated gzip") and report.quarantined == 3
    assert report.new == report.records - 3 > 100 and store.traces().num_rows == report.new
    # a Parquet file that is not one: recorded as quarantined, the ingest goes on
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    report2 = ingest_file(store, str(bad), IngestConfig())
    assert (
        report2.quarantined == 1
        and "not a readable Parquet file" in store.quarantine(report2.batch)[0]["reason"]
    )


def test_sft_demonstrations_read_through_the_same_reader(tmp_path, tiny_model):
    """flows/sft.py's demonstration file: a BOM, a non-UTF-8 line, a lone surrogate and a
    10,000-deep line are quarantined with their line, the good demonstrations kept."""
    from transformers import AutoTokenizer

    from flywheel.flows.sft import demonstrations_from_file

    demo = lambda w: json.dumps({"messages": [{"role": "user", "content": f"Say {w}."},  # noqa: E731
                                              {"role": "assistant", "content": w}]}).encode()  # fmt: skip
    lines = [b"\xef\xbb\xbf" + demo("red"), b'{"messages": "caf\xe9"}', demo("blue"),
             b'{"messages": [{"role": "user", "content": "\\udc00"}, {"role": "assistant", "content": "x"}]}',
             b"[" * 10_000 + b"]" * 10_000, demo("gold")]  # fmt: skip
    path = tmp_path / "demos.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    examples, quarantined = demonstrations_from_file(str(path), AutoTokenizer.from_pretrained(tiny_model))
    assert len(examples) == 3
    assert [q["_error"].split(":")[0] for q in quarantined] == ["line 2", "line 4", "line 5"]
    assert "not UTF-8" in quarantined[0]["_error"] and "lone surrogate" in quarantined[1]["_error"]
