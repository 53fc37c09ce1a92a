"""The code domain: generation from seeds, splits, extraction, and verification in bwrap."""

import json

import pytest

from flywheel.environments import Score, get_environment
from flywheel.environments.parsing.code import extract_code
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox

env = get_environment("code")


@pytest.fixture(scope="module")
def box():
    return BwrapSandbox(Limits(wall_s=10), concurrency=4)


def lookup_solution(task, wrong_after: int | None = None) -> str:
    """A 'solution' that answers the hidden tests from a table (optionally only some)."""
    v = json.loads(task.verifier_json)
    table = {json.dumps(args): out for args, out in v["tests"][:wrong_after]}
    return (
        "```python\nimport json\n"
        f"TABLE = {json.dumps(table)!r}\n"
        f"def {v['entry']}(*args):\n"
        "    return json.loads(TABLE).get(json.dumps(list(args)))\n```"
    )


def verify(box, task, completion) -> Score:
    job = env.job(task, completion)
    return job if isinstance(job, Score) else env.score(task, job, box.run(job))


def test_three_levels_and_hidden_tests_not_in_prompt():
    assert len(env.levels) >= 3
    for level in env.levels:
        task = env.make_tasks("train", level, 1, 1)[0]
        tests = json.loads(task.verifier_json)["tests"]
        assert task.level == level and len(tests) == 8
        for args, _ in tests:
            assert f"({', '.join(map(repr, args))})" not in task.prompt[1]["content"]


def test_extract_code():
    assert extract_code("Sure:\n```python\ndef f(x):\n    return x\n```\nDone", "f").startswith("def f")
    assert extract_code("def f(x): return 1", "f") == "def f(x): return 1"
    assert extract_code("I cannot do that.", "f") is None


@pytest.mark.parametrize("level", [1, 2, 3])
def test_correct_solution_scores_one(box, level):
    task = env.make_tasks("train", level, 3, 1)[0]
    score = verify(box, task, lookup_solution(task))
    assert (score.reward, score.verdict, score.tests_passed) == (1.0, "pass", 8), score.error


def test_partial_solution_scores_the_fraction(box):
    task = env.make_tasks("train", 1, 3, 1)[0]
    score = verify(box, task, lookup_solution(task, wrong_after=6))
    assert score.reward == pytest.approx(6 / 8) and score.verdict == "fail"


@pytest.mark.parametrize(
    "body, verdict",
    [
        ("no code at all, sorry", "no_code"),
        ("```python\ndef {entry}(*a):\n    while True: pass\n```", "timeout"),
        ("```python\ndef {entry}(*a):\n    return None\n```", "fail"),
        ("```python\ndef {entry}(*a):\n    raise ValueError('no')\n```", "fail"),
        ("```python\ndef {entry}(:\n```", "fail"),
        ("```python\ndef other_name(*a):\n    return 1\n```", "fail"),
    ],
)
def test_wrong_answers_score_zero(box, body, verdict):  # hostile ones: test_reward_hacks.py
    task = env.make_tasks("train", 2, 5, 1)[0]
    entry = json.loads(task.verifier_json)["entry"]
    score = verify(box, task, body.format(entry=entry))
    assert score.reward == 0.0 and score.verdict == verdict, score


def test_a_broken_sandbox_is_an_error_verdict_not_a_crash():
    from flywheel.environments.sandbox import ExecResult

    task = env.make_tasks("train", 1, 0, 1)[0]
    job = env.job(task, lookup_solution(task))
    score = env.score(task, job, ExecResult(None, "", "", 0.1, error="bwrap failed: no user namespace"))
    assert (score.reward, score.verdict) == (0.0, "error") and "bwrap failed" in score.error
