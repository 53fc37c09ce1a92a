"""The math domain: generation from seeds, splits, answer reading and exact checking."""

import json
from fractions import Fraction

import pytest

from flywheel.environments import Score, get_environment
from flywheel.environments.domains.math import FAMILIES, read_answer

env = get_environment("math")


def verify(task, completion) -> Score:
    score = env.check(task, completion)
    assert isinstance(score, Score), "the math domain needs no sandbox"
    return score


def golden(task) -> str:
    return f"Let me work it out step by step.\nAnswer: {json.loads(task.verifier_json)['answer']}"


@pytest.mark.parametrize("level", [1, 2, 3])
def test_levels_are_valid_and_varied(level):
    assert len(env.levels) >= 3 and len(FAMILIES[level]) >= 3
    tasks = env.make_tasks("train", level, 11, 200)
    assert all(t.level == level and t.domain == "math" for t in tasks)
    assert len({t.prompt[1]["content"] for t in tasks}) >= 190  # hundreds of distinct tasks
    for t in tasks[:5]:
        assert "Answer: <number>" in t.prompt[1]["content"]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_golden_answers_score_one(level):
    for task in env.make_tasks("train", level, 3, 150) + env.make_tasks("eval", level, 3, 50):
        score = verify(task, golden(task))
        assert (score.reward, score.verdict, score.outcome, score.penalty) == (1.0, "pass", 1.0, 0.0), (
            task.prompt[1]["content"], score,
        )  # fmt: skip


def test_wrong_answers_score_below_one():
    for task in env.make_tasks("train", 3, 5, 40):
        v = json.loads(task.verifier_json)
        exact = Fraction(v["exact"])
        for wrong in (exact + 1, exact - Fraction(2, 100) if v["kind"] == "dec2" else exact - 1, -exact - 7, exact * 10 + 3):
            text = str(wrong) if wrong.denominator == 1 else f"{float(wrong):.2f}"
            score = verify(task, f"Answer: {text}")
            assert score.reward == 0.0 and score.verdict == "fail", (v, text, score)


def _task(kind: str):
    for task in env.make_tasks("train", 2, 1, 200):
        if json.loads(task.verifier_json)["kind"] == kind:
            return task
    raise AssertionError(f"no {kind} task")


def test_decimal_tolerance_is_half_a_cent_around_the_exact_value():
    task = _task("dec2")
    exact = Fraction(json.loads(task.verifier_json)["exact"])
    for delta, ok in [(Fraction(0), True), (Fraction(4, 1000), True), (Fraction(-5, 1000), True),
                      (Fraction(6, 1000), False), (Fraction(-51, 10000), False)]:  # fmt: skip
        value = exact + delta
        text = f"{value.numerator}/{value.denominator}"  # exact, so the edge is tested, not float noise
        assert verify(task, f"Answer: {text}").verdict == ("pass" if ok else "fail"), (delta, text)


def test_whole_number_answers_are_exact():
    task = _task("int")
    n = int(json.loads(task.verifier_json)["exact"])
    assert verify(task, f"Answer: {n}.0").verdict == "pass"
    assert verify(task, f"Answer: {n}.001").verdict == "fail"
    assert verify(task, f"Answer: {n + 1}").verdict == "fail"


def test_accepted_number_forms():
    assert read_answer("Answer: 1,234")[:2] == (Fraction(1234), True)
    assert read_answer("Answer: 12.50")[:2] == (Fraction(25, 2), True)
    assert read_answer("Answer: -3/4")[:2] == (Fraction(-3, 4), True)
    assert read_answer("Answer: 7.")[:2] == (Fraction(7), True)
    assert read_answer("**Answer:** $1,234.00")[:2] == (Fraction(1234), False)
    assert read_answer("The total is \\boxed{42}.")[:2] == (Fraction(42), False)


def test_only_the_last_answer_line_counts():
    task = _task("int")
    right = json.loads(task.verifier_json)["answer"]
    assert verify(task, f"Answer: {right}\nHmm, on second thought\nAnswer: {int(right) + 1}").verdict == "fail"
    assert verify(task, f"Answer: {int(right) + 1}\nCorrection:\nAnswer: {right}").verdict == "pass"


@pytest.mark.parametrize(
    "body, verdict, reward",
    [
        ("I think it is {right}.", "no_code", 0.0),  # no answer line: not read from prose
        ("", "no_code", 0.0),
        ("Answer: I don't know", "no_code", 0.0),
        ("Answer: {right} or {other}", "fail", 0.0),  # hedging is ambiguous
        ("answer: {right} dollars", "pass", 0.9),  # right, but not the stated format
        ("**Answer:** {right}", "pass", 0.9),
        ("so \\boxed{{{right}}}", "pass", 0.9),
        ("Answer: {other} km", "fail", 0.0),  # the penalty is charged only on a right answer
        ("Answer: 12,5", "fail", 0.0),  # a decimal comma reads as two numbers
    ],
)
def test_malformed_answers_get_clear_verdicts(body, verdict, reward):
    task = _task("int")
    right = json.loads(task.verifier_json)["answer"]
    score = verify(task, body.format(right=right, other=int(right) + 3))
    assert score.verdict == verdict and score.reward == pytest.approx(reward), score
    assert score.error or verdict == "pass"
