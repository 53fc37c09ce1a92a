"""Rows that test nothing (issue 41): tests that never touch the function are quarantined at
parse time; tests a stub passes, or that the row's own reference fails, are quarantined by
FileTasks.validate in the real bubblewrap sandbox; verdicts are cached per process."""

from __future__ import annotations

import json

import pytest

from flywheel.environments.sources import task_checks
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox
from flywheel.environments.sources.task_file import FileTasks, TaskFileError


@pytest.fixture(scope="module")
def box():
    sandbox = BwrapSandbox(Limits(wall_s=20), 2)
    yield sandbox
    sandbox.close()


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def mbpp(task_id, code: str, tests: list[str]) -> dict:
    return {"task_id": task_id, "text": f"Task {task_id}.", "code": code, "test_list": tests}


ADD = "def add(a, b):\n    return a + b"
GOOD = [
    mbpp("good-mbpp", ADD, ["assert add(1, 2) == 3", "assert add(-2, 2) == 0"]),
    {"task_id": "good-humaneval", "prompt": "def twice(x):\n    \"\"\"Twice x.\"\"\"\n", "entry_point": "twice",
     "canonical_solution": "    return 2 * x\n",
     "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert all(candidate(i) == i + i for i in range(9))\n"},
    {"id": "good-io", "prompt": "Sum the numbers on stdin.", "tests": [{"input": "1 2\n", "output": "3"}],
     "reference": "```python\nprint(sum(map(int, input().split())))\n```"},
    {"id": "good-loop", "prompt": "Write sq(x).", "entry_point": "sq",  # asserts on computed values: all in the rest
     "tests": "for i in range(5):\n    assert sq(i) == i * i", "reference": "```python\ndef sq(x):\n    return x * x\n```"},
]  # fmt: skip


def test_tests_that_never_call_the_function_are_quarantined_at_parse_time(tmp_path):
    rows = [
        *GOOD,
        # a helper of the tests' own is what they call
        {"id": "helper", "prompt": "Write add.", "entry_point": "add",
         "tests": "def helper(x):\n    return x\nassert helper(1) == 1"},
        # the tests define the function themselves, so the candidate is shadowed
        {"id": "shadow", "prompt": "Write add.", "entry_point": "add",
         "tests": "def add(a, b):\n    return a + b\nassert add(1, 2) == 3 and add(2, 2) == 4"},
        # in another script, imported under the function's name
        {"id": "import", "prompt": "Write 合計.", "entry_point": "合計",
         "tests": "from math import fsum as 合計\nassert 合計([1, 2]) == 3 and True"},
        # HumanEval's check(candidate) that never uses candidate
        {"task_id": "check-unused", "prompt": "def f(x):\n", "entry_point": "f", "canonical_solution": "    return x\n",
         "test": "def check(candidate):\n    assert (lambda y: y)(1) == 1\n    assert 2 > 1\n"},
    ]  # fmt: skip
    env = FileTasks(write_jsonl(tmp_path / "t.jsonl", rows))
    why = {q["where"]: q["reason"] for q in env.quarantined}
    assert env.rows == len(GOOD)
    assert why == {"line 5": "the tests never call add",
                   "line 6": "the tests define add themselves, so the candidate is never called",
                   "line 7": "the tests define 合計 themselves, so the candidate is never called",
                   "line 8": "the tests' check(candidate) never uses the candidate"}  # fmt: skip


def test_stub_passing_and_reference_failing_rows_are_quarantined_in_the_sandbox(tmp_path, box):
    rows = [
        *GOOD,
        mbpp("all-true", "def is_even(n):\n    return n % 2 == 0", ["assert is_even(2) == True", "assert is_even(4)"]),
        mbpp("identity", "def clamp(x):\n    return max(0, min(9, x))", ["assert clamp(3) == 3", "assert clamp(5) == 5"]),
        mbpp("is-none", "def log(x):\n    print(x)", ["assert log('a') is None"]),
        # the asserts are swallowed: any candidate passes, whatever it returns
        {"id": "swallowed", "prompt": "Write g.", "entry_point": "g",
         "tests": "try:\n    assert g(1) == 2\nexcept Exception:\n    pass"},
        # HumanEval form, written with a helper that hides the candidate's result
        {"task_id": "helper-check", "prompt": "def h(x):\n    \"\"\"x + 1.\"\"\"\n", "entry_point": "h", "canonical_solution": "    return x + 1\n",
         "test": "def same(a, b):\n    return True\n\ndef check(candidate):\n    assert same(candidate(1), 2)\n"},
        mbpp("wrong-ref", "def mul(a, b):\n    return a + b", ["assert mul(2, 3) == 6"]),
        {"id": "io-empty", "prompt": "Print nothing.", "tests": [{"input": "5\n", "output": ""}]},
        {"id": "io-echo", "prompt": "Repeat the line.", "tests": [{"input": "abc\n", "output": "abc"}]},
        {"id": "io-wrong-ref", "prompt": "Double it.", "tests": [{"input": "4\n", "output": "8"}],
         "reference": "```python\nprint(int(input()) + 2)\n```"},
        # written to pass any function of the right arity and fail a (*args, **kwargs) stub
        {"task_id": "arity", "text": "Add.", "code": ADD, "entry_point": "add",
         "test_list": ["try:\n    add(1)\n    ok = False\nexcept TypeError:\n    ok = True\nassert ok"]},
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    task_checks._VERDICTS.clear()
    env = FileTasks(path)
    assert env.rows == len(rows) and env.validate(box) == len(rows)
    kept = {r.key for cell in env.cells.values() for r in cell}
    assert kept == {"good-mbpp", "good-humaneval", "good-io", "good-loop"}
    why = {q["where"]: q["reason"] for q in env.quarantined}
    assert why["line 5"] == "tests nothing: a stub passes (returns True)"
    assert why["line 6"] == "tests nothing: a stub passes (returns its first argument)"
    assert why["line 7"] == "tests nothing: a stub passes (returns None)"
    assert (
        why["line 8"]
        == "tests nothing: a stub passes (returns None, returns its first argument, returns True, raises)"
    )
    assert why["line 9"].startswith("tests nothing: a stub passes (returns None")
    assert why["line 10"].startswith("reference fails: fail")
    assert why["line 11"] == "tests nothing: a stub passes (prints nothing)"
    assert why["line 12"] == "tests nothing: a stub passes (echoes its input)"
    assert why["line 13"].startswith("reference fails: fail")
    assert (
        why["line 14"]
        == "tests nothing: a stub passes (returns None, returns its first argument, returns True, raises)"
    )
    assert all(q["file"] == path for q in env.quarantined)
    assert env.describe().startswith("4 rows, 10 quarantined")
    # the same file again in this process: nothing runs, the same rows go
    again = FileTasks(path)
    assert again.validate(box) == 0 and {q["where"] for q in again.quarantined} == set(why)


def test_a_file_whose_every_row_tests_nothing_stops(tmp_path, box):
    path = write_jsonl(
        tmp_path / "all-bad.jsonl", [mbpp("t", "def t(x):\n    return x", ["assert t(1) == 1"])]
    )
    env = FileTasks(path)
    with pytest.raises(TaskFileError, match=r"all-bad\.jsonl has no usable row .*a stub passes"):
        env.validate(box)


def test_a_run_checks_its_task_files_at_start_up(tiny_model, tmp_path):
    """The Runtime validates task files once its sandbox is up, and the run's quarantine
    file holds the rows dropped then beside those dropped at parse time."""
    from flywheel.config import FlywheelConfig
    from flywheel.run.runtime import Runtime

    path = write_jsonl(tmp_path / "rows.jsonl", [*GOOD, mbpp("t", "def t(x):\n    return x", ["assert t(1) == 1"]),
                                                 {"answer": "no prompt"}])  # fmt: skip
    cfg = FlywheelConfig(run_id="checks", runs_dir=str(tmp_path / "runs"), model={"path": tiny_model},
                         sampler={"domains": [f"file:{path}"], "levels": [1]}, tracking={"backends": []})  # fmt: skip
    rt = Runtime(cfg)
    try:
        assert rt.domains[f"file:{path}"].rows == len(GOOD)
        lines = (cfg.run_dir / "quarantine" / "rows.jsonl.jsonl").read_text().splitlines()
        assert {json.loads(ln)["where"]: json.loads(ln)["reason"][:14] for ln in lines} == {
            "line 5": "tests nothing:",
            "line 6": "no prompt (a t",
        }
    finally:
        rt.close()


def test_a_broken_sandbox_keeps_rows_unchecked_and_uncached(tmp_path):
    """The sandbox failing (not the row) quarantines nothing and caches nothing, so the
    next load checks again. A stand-in sandbox: this is the bookkeeping, not the run."""
    from flywheel.environments.sandbox import ExecResult

    class Broken:
        calls = 0

        def map(self, jobs):
            Broken.calls += 1
            return [ExecResult(None, "", "", 0.0, error="the pool died") for _ in jobs]

    path = write_jsonl(tmp_path / "t.jsonl", [mbpp("x", ADD + "  # broken box", ["assert add(1, 2) == 3"])])
    env = FileTasks(path)
    assert env.validate(Broken()) == 1 and env.rows == 1 and not env.quarantined
    assert Broken.calls == 2  # one more try
    assert FileTasks(path).validate(Broken()) == 1  # not cached: checked again
