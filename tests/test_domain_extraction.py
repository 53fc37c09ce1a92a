"""The extraction domain: generated documents, splits, JSON reading and per-field checks."""

import json

import pytest

from flywheel.environments import Score, get_environment
from flywheel.environments.parsing.json_object import find_last_object

env = get_environment("extraction")


def verify(task, completion) -> Score:
    score = env.check(task, completion)
    assert isinstance(score, Score), "the extraction domain needs no sandbox"
    return score


def fields(task) -> dict:
    return json.loads(task.verifier_json)["fields"]


def golden(task) -> dict:
    return {k: f["value"] for k, f in fields(task).items()}


def fenced(obj) -> str:
    return f"Here are the figures:\n```json\n{json.dumps(obj, indent=2)}\n```"


@pytest.mark.parametrize("level, lo, hi", [(1, 2, 3), (2, 4, 6), (3, 3, 5)])
def test_levels_are_valid_and_varied(level, lo, hi):
    tasks = env.make_tasks("train", level, 11, 200)
    assert all(t.level == level and t.domain == "extraction" for t in tasks)
    assert len({t.prompt[1]["content"] for t in tasks}) == 200
    assert all(lo <= len(fields(t)) <= hi for t in tasks)
    for t in tasks[:10]:
        for key in fields(t):
            assert f"`{key}`" in t.prompt[1]["content"]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_golden_answers_score_one(level):
    for task in env.make_tasks("train", level, 3, 150) + env.make_tasks("eval", level, 3, 50):
        for completion in (fenced(golden(task)), json.dumps(golden(task))):  # fenced and bare
            score = verify(task, completion)
            assert (score.reward, score.verdict, score.penalty) == (1.0, "pass", 0.0), (task.prompt[1]["content"], score)


def test_level_two_distractors_are_in_the_document():
    """A field read from the prior-year column or the other unit must be wrong."""
    checked = 0
    for task in env.make_tasks("train", 2, 4, 60):
        want = golden(task)
        if "prior_year_revenue_musd" in want and "revenue_musd" in want:
            swapped = {**want, "revenue_musd": want["prior_year_revenue_musd"],
                       "prior_year_revenue_musd": want["revenue_musd"]}  # fmt: skip
            score = verify(task, fenced(swapped))
            assert score.verdict == "fail" and score.outcome == pytest.approx(1 - 2 / len(want))
            checked += 1
    assert checked >= 2


def test_wrong_answers_score_below_one():
    for task in env.make_tasks("train", 3, 5, 60):
        want = golden(task)
        key = next(iter(want))
        for bad in ("", "unknown", 0, -1, (want[key] * 1.01 + 1) if isinstance(want[key], (int, float)) else want[key] + "x"):
            score = verify(task, fenced({**want, key: bad}))
            assert score.verdict == "fail" and score.reward == pytest.approx(1 - 1 / len(want)), (key, bad, score)
        missing = {k: v for k, v in want.items() if k != key}
        assert verify(task, fenced(missing)).tests_passed == len(want) - 1
        assert verify(task, fenced({})).reward == 0.0


def _task_with(key: str, level: int):
    for task in env.make_tasks("train", level, 2, 300):
        if key in fields(task):
            return task
    raise AssertionError(key)


def test_number_tolerances():
    task = _task_with("runtime_h", 3)  # rounded to 1 decimal: half a place either way
    want = golden(task)
    assert verify(task, fenced({**want, "runtime_h": want["runtime_h"] + 0.049})).verdict == "pass"
    assert verify(task, fenced({**want, "runtime_h": want["runtime_h"] - 0.051})).verdict == "fail"
    task = _task_with("total_revenue_usd", 3)  # exact figure: relative 1e-6
    want = golden(task)
    v = want["total_revenue_usd"]
    assert verify(task, fenced({**want, "total_revenue_usd": v * (1 + 5e-7)})).verdict == "pass"
    assert verify(task, fenced({**want, "total_revenue_usd": v / 1000})).verdict == "fail"  # still in thousands


def test_strings_are_normalised_and_numbers_as_strings_are_penalised():
    task = _task_with("customer", 2)
    want = golden(task)
    loose = {**want, "customer": "  " + want["customer"].upper().replace(" ", "   ") + " "}
    assert verify(task, fenced(loose)).reward == 1.0
    num_key = next(k for k, f in fields(task).items() if f["type"] == "number")
    score = verify(task, fenced({**want, num_key: f"${want[num_key]:,}"}))
    assert (score.verdict, score.outcome, score.penalty, score.reward) == ("pass", 1.0, -0.1, 0.9)
    assert verify(task, fenced({**want, num_key: True})).verdict == "fail"  # a bool is not a number
    wrong = verify(task, fenced({**want, num_key: "$-12,345,678.9"}))  # wrong: no penalty on top
    assert (wrong.verdict, wrong.penalty) == ("fail", 0.0) and wrong.reward == pytest.approx(1 - 1 / len(want))


def test_the_last_object_wins():
    task = env.make_tasks("train", 1, 0, 1)[0]
    want = golden(task)
    wrong = {k: "nope" for k in want}
    assert verify(task, fenced(want) + "\nActually:\n" + json.dumps(wrong)).verdict == "fail"
    assert verify(task, json.dumps(wrong) + "\nCorrected:\n" + fenced(want)).verdict == "pass"
    assert find_last_object('text {"a": {"b": 1}} more') == {"a": {"b": 1}}  # outermost, not inner


@pytest.mark.parametrize(
    "completion",
    ["I could not find the figures.", "", "```json\n{not json}\n```", '["a", "list"]', '{"a": 1'],
)
def test_malformed_outputs_are_no_code(completion):
    task = env.make_tasks("train", 2, 0, 1)[0]
    score = verify(task, completion)
    assert (score.verdict, score.reward, score.tests_passed) == ("no_code", 0.0, 0) and score.error
