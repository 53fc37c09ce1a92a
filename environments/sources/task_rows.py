"""Rows of a task file: read (JSONL, Parquet, a `datasets` dir), shapes recognised, checked.

The row schema (one JSON object per line, or a Parquet/`datasets` row):

  prompt     text, or chat messages [{"role", "content"}]                     required
  answer     the expected answer (exact, numeric, math, regex: the pattern,
             json_fields: an object of expected fields)
  tests      python_tests: assert lines (a string or a list of them) or a
             HumanEval-style `def check(candidate)`; python_io: a list of
             {"input", "output"} cases. Never shown in the prompt.
  verifier   exact | numeric | math | json_fields | regex | python_tests |
             python_io | none (scored by reward.functions only). Default:
             python_tests with tests, json_fields for an object answer,
             numeric for a number, exact for other answers, none without either.
  id, level (int >= 1, default 1), split (train | eval; test and validation
  mean eval), metadata (an object), entry_point (python_tests), tolerance
  (numeric, json_fields), reference (a reply that passes, for SFT).
Every other column rides along as a column for reward functions (TRL's convention).

The shapes users arrive with are read as such: TRL (`prompt` plus columns), veRL
(`prompt`, `reward_model.ground_truth`, `data_source`, `ability`, `extra_info`), SkyRL
(`reward_spec.ground_truth`), HumanEval (`prompt` code, `test`, `entry_point`,
`canonical_solution`) and MBPP (`text`, `test_list`, `code`).

A row that cannot be used is quarantined with its file, line and reason, and the rest
go on. A row's answer or tests are checked by its verifier kind (environments/verifiers/,
`prepare`); nothing here runs the tests: they are parsed (verifiers/python_tests.py).
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.environments.verifiers import KINDS
from flywheel.environments.verifiers.base import RowError
from flywheel.environments.verifiers.python_tests import TestsError, split_tests
from flywheel.storage.schema import stable_id

MAX_PROMPT_CHARS = 100_000
MAX_DEPTH = 64  # nesting levels a row may have; deeper ones are quarantined
KNOWN = tuple(KINDS)  # the verifier kinds, in the order errors name them
SPLITS = {"train": "train", "eval": "eval", "test": "eval", "validation": "eval", "valid": "eval", "dev": "eval"}
RESERVED = {"prompt", "answer", "tests", "verifier", "id", "level", "split", "metadata", "entry_point", "tolerance",
            "reference", "task_id", "test", "canonical_solution", "text", "test_list", "code", "test_setup_code",
            "challenge_test_list", "reward_model", "reward_spec", "data_source", "ability", "extra_info"}  # fmt: skip
CODER = "You are a careful Python programmer."


@dataclass
class Row:
    key: str  # the row's id, else a hash of its content: stable across machines
    prompt: list[dict]
    verifier: str
    level: int = 1
    split: str | None = None
    answer: object = None
    tests: object = None  # python_tests: split_tests(...); python_io: [{"input", "output"}]
    tolerance: float | None = None
    prefix: str = ""  # code the prompt showed, run before the solution (HumanEval helpers)
    text_prompt: bool = False  # the prompt came as text (reward functions get text)
    metadata: dict = field(default_factory=dict)
    columns: dict = field(default_factory=dict)
    reference: str | None = None


def _messages(prompt) -> tuple[list[dict], bool]:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise RowError("empty prompt")
        return [{"role": "user", "content": prompt}], True
    if isinstance(prompt, list) and prompt:
        out = []
        for m in prompt:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or m.get("role") not in (
                "system", "user", "assistant"):  # fmt: skip
                raise RowError("prompt messages must be {role: system|user|assistant, content: text}")
            out.append({"role": m["role"], "content": m["content"]})
        if out[-1]["role"] == "assistant":
            raise RowError("the prompt ends with an assistant message")
        return out, False
    raise RowError("no prompt (a text or a list of chat messages under 'prompt')")


def _code_prompt(code: str) -> list[dict]:
    user = (f"Complete this Python function:\n\n```python\n{code.rstrip()}\n```\n\n"
            "Reply with the complete function in one ```python code block.")  # fmt: skip
    return [{"role": "system", "content": CODER}, {"role": "user", "content": user}]


def _infer(answer, tests) -> str:
    if tests is not None:
        is_io = isinstance(tests, list) and tests and all(isinstance(t, dict) for t in tests)
        return "python_io" if is_io else "python_tests"
    if answer is None:
        return "none"
    if isinstance(answer, dict):
        return "json_fields"
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return "numeric"
    if isinstance(answer, str) and re.fullmatch(r"\s*-?[\d,]*\.?\d+(?:/\d+)?\s*", answer):
        return "numeric"
    return "exact"


def normalise(raw: dict, eval_only: bool = False) -> Row:
    """One row of any known shape -> a checked Row; raises RowError with the reason."""
    raw = {k: v for k, v in raw.items() if v is not None}  # a Parquet column another shape uses is null here
    metadata = dict(raw.get("metadata") or {}) if isinstance(raw.get("metadata") or {}, dict) else None
    if metadata is None:
        raise RowError("metadata must be an object")
    answer, tests, entry, prefix, reference = raw.get("answer"), raw.get("tests"), raw.get("entry_point"), "", raw.get("reference")
    split_done = None  # MBPP's tests, split while building its prompt
    key = raw.get("id", raw.get("task_id"))
    if "test" in raw and "entry_point" in raw and isinstance(raw.get("prompt"), str):  # HumanEval
        prompt, text_prompt = _code_prompt(raw["prompt"]), True
        tests, prefix = raw["test"], raw["prompt"]
        if raw.get("canonical_solution") and not reference:
            reference = f"```python\n{raw['prompt']}{raw['canonical_solution']}```"
    elif "text" in raw and "test_list" in raw and "prompt" not in raw:  # MBPP
        if not isinstance(raw["test_list"], list):
            raise RowError("test_list must be a list of assert lines")
        try:
            tests = split_done = split_tests([raw.get("test_setup_code") or "", *raw["test_list"]], entry, raw.get("code"))
        except TestsError as exc:
            raise RowError(str(exc)) from exc
        user = (f"{raw['text']}\nThe function must be named `{tests['entry']}`. "
                "Reply with the complete function in one ```python code block.")  # fmt: skip
        prompt, text_prompt = [{"role": "system", "content": CODER}, {"role": "user", "content": user}], True
        if raw.get("code") and not reference:
            reference = f"```python\n{raw['code'].strip()}\n```"
    else:
        prompt, text_prompt = _messages(raw.get("prompt"))
    for nested, label in (("reward_model", "veRL"), ("reward_spec", "SkyRL")):
        spec = raw.get(nested)
        if isinstance(spec, dict) and answer is None:
            answer = spec.get("ground_truth")
            metadata.setdefault("shape", label)
    for k in ("data_source", "ability", "extra_info"):
        if k in raw:
            metadata.setdefault(k, raw[k])
    size = sum(len(m["content"]) for m in prompt)
    if size > MAX_PROMPT_CHARS:
        raise RowError(f"prompt is {size} characters, over the limit of {MAX_PROMPT_CHARS}")
    verifier = raw.get("verifier") or _infer(answer, tests)
    if verifier not in KNOWN:
        raise RowError(f"unknown verifier {verifier!r}; known: {', '.join(KNOWN)}")
    tolerance = raw.get("tolerance")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        raise RowError(f"tolerance must be a number >= 0, not {tolerance!r}")
    answer, tests = KINDS[verifier].prepare(answer, tests, entry, raw.get("code"), presplit=split_done is not None)
    level = raw.get("level", 1)
    if isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise RowError(f"level must be an integer >= 1, not {level!r}")
    split = raw.get("split")
    if split is not None and split not in SPLITS:
        raise RowError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    content = stable_id(prompt, verifier, answer, tests)
    columns = {k: v for k, v in raw.items() if k not in RESERVED}
    if answer is not None:
        columns.setdefault("answer", answer)
    return Row(
        key=str(key) if key is not None else content, prompt=prompt, verifier=verifier, level=level,
        split="eval" if eval_only else (SPLITS[split] if split else None), answer=answer, tests=tests,
        tolerance=tolerance, prefix=prefix, text_prompt=text_prompt, metadata=metadata, columns=columns,
        reference=reference if isinstance(reference, str) and reference.strip() else None,
    )  # fmt: skip


def read_rows(path: str):
    """(where, raw row or None, error) for every row of the file, in order.

    Nothing in a file stops the others: a line or row that cannot be read (not UTF-8, not
    JSON, nested deeper than MAX_DEPTH, a lone surrogate, an undecodable binary value) is
    yielded with its reason; a truncated gzip keeps the lines before the cut and reports
    the cut; a Parquet row group that does not decode is reported and the others read; a
    file that is not Parquet at all is one entry "file" with the reason. A JSONL file may
    start with a UTF-8 BOM."""
    p = Path(path)
    if p.is_dir():
        rows = _dataset_rows(p)
    elif p.suffix == ".parquet":
        rows = _parquet_rows(p)
    elif p.name.endswith((".jsonl", ".json", ".jsonl.gz", ".ndjson")):
        rows = _jsonl_rows(p)
    else:
        raise FileNotFoundError(f"{path}: not a JSONL, Parquet or `datasets` dir")
    for where, row, error in rows:
        if row is not None and not error:
            try:
                row = clean_value(row)
            except RowError as exc:
                row, error = None, str(exc)
        yield where, row, error


def _jsonl_rows(p: Path):
    opener = gzip.open if p.name.endswith(".gz") else open
    n = 0
    with opener(p, "rb") as f:
        lines = iter(f)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (EOFError, OSError, zlib.error) as exc:  # a cut or corrupt gzip: what came before is kept
                yield f"line {n + 1}", None, f"truncated gzip ({exc})"
                return
            n += 1
            if n == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            if not raw.strip():
                continue
            yield (f"line {n}", *_json_row(raw))


def _json_row(raw: bytes) -> tuple[dict | None, str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        row = json.loads(text)
    except RecursionError:  # the C decoder's own guard: far deeper than MAX_DEPTH
        return None, f"nested deeper than {MAX_DEPTH} levels"
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    return (row, "") if isinstance(row, dict) else (None, "not a JSON object")


def _parquet_rows(p: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:  # page checksums, where the writer stored them, catch flipped bytes in the data
        pf = pq.ParquetFile(p, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        yield "file", None, f"{p}: not a readable Parquet file ({exc})"
        return
    n = 0
    for g in range(pf.metadata.num_row_groups):
        start, size = n, pf.metadata.row_group(g).num_rows
        try:  # in batches, so a group's rows before the damage are kept too
            for batch in pf.iter_batches(batch_size=4096, row_groups=[g]):
                for row in batch.to_pylist():
                    n += 1
                    yield f"row {n}", row, ""
        except (pa.ArrowException, OSError, ValueError) as exc:
            yield f"row group {g} (rows {n + 1}-{start + size})", None, f"row group does not decode ({exc})"
            n = start + size


def clean_value(value, where: str = "", depth: int = 0):
    """`value` with binary values decoded as UTF-8 text; RowError naming the field for a
    value nested deeper than MAX_DEPTH, a string with a lone surrogate (which no UTF-8
    writer, the lake's included, accepts) or bytes that are not UTF-8. Recursion is
    bounded by MAX_DEPTH, far under Python's limit."""
    if depth > MAX_DEPTH:
        raise RowError(f"nested deeper than {MAX_DEPTH} levels (at {where or 'the row'})")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RowError(f"lone surrogate in field {where or '(top)'} at character {exc.start}") from None
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise RowError(f"binary value in field {where or '(top)'}: not UTF-8 text") from None
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            name = clean_value(k, where, depth + 1) if isinstance(k, (str, bytes)) else k
            out[name] = clean_value(v, f"{where}.{name}" if where else str(name), depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [clean_value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    return value


def _dataset_rows(p: Path):
    from datasets import Dataset, load_from_disk

    try:
        loaded = load_from_disk(str(p))
    except (FileNotFoundError, ValueError) as exc:
        raise FileNotFoundError(f"{p}: not a dir saved with `datasets`' save_to_disk ({exc})") from exc
    parts = {None: loaded} if isinstance(loaded, Dataset) else dict(loaded)
    for split, ds in parts.items():
        for n, row in enumerate(ds, 1):
            if split is not None and "split" not in row:
                row = {**row, "split": split}
            yield (f"row {n}" if split is None else f"{split} row {n}"), row, ""
