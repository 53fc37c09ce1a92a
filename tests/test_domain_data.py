"""The data domain: generation from seeds, splits, and verification in bwrap."""

import json
import re
from datetime import date

import pytest

from flywheel.environments import Score, get_environment
from flywheel.environments.domains.data import FAMILIES, run_reference
from flywheel.environments.sandbox import ExecResult, Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox

env = get_environment("data")


@pytest.fixture(scope="module")
def box():
    return BwrapSandbox(Limits(wall_s=10), concurrency=4)


def hidden(task) -> list:
    return json.loads(task.verifier_json)["tests"]


def reference(task) -> str:
    return "Here it is:\n```python\n" + json.loads(task.verifier_json)["reference"] + "```\n"


def lookup_solution(task, first: int) -> str:
    """Answers only the first `first` hidden tests, from a table."""
    table = dict(hidden(task)[:first])
    return f"```python\nimport json\nT = json.loads({json.dumps(json.dumps(table))})\ndef transform(text):\n    return T.get(text, '')\n```"


def verify_all(box, tasks, completions) -> list[Score]:
    jobs = [env.job(t, c) for t, c in zip(tasks, completions)]
    runnable = [j for j in jobs if not isinstance(j, Score)]
    results = iter(box.map(runnable))
    return [j if isinstance(j, Score) else env.score(t, j, next(results)) for t, j in zip(tasks, jobs)]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_levels_are_valid_varied_and_hide_their_tests(level):
    assert len(FAMILIES[level]) >= 3
    tasks = env.make_tasks("train", level, 11, 150)
    assert all(t.level == level and t.domain == "data" for t in tasks)
    assert len({t.prompt[1]["content"] for t in tasks}) == 150
    for task in tasks[:20]:
        tests = hidden(task)
        assert len(tests) == 6 and len({i for i, _ in tests}) == 6
        for text, _ in tests:
            assert text not in task.prompt[1]["content"]
        assert "reference" not in task.prompt[1]["content"] and "transform(text: str) -> str" in task.prompt[1]["content"]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_reference_solutions_score_one_in_bwrap(box, level):
    tasks = env.make_tasks("train", level, 3, 12) + env.make_tasks("eval", level, 3, 4)
    for task, score in zip(tasks, verify_all(box, tasks, [reference(t) for t in tasks])):
        assert (score.reward, score.verdict, score.tests_passed, score.penalty) == (1.0, "pass", 6, 0.0), score.error


def test_an_independent_solution_agrees_with_the_reference():
    """Dates reformatted with datetime, written apart from the module's reference: the
    expected outputs do not depend on one implementation's quirks."""
    formats = {"DD/MM/YYYY": "%d/%m/%Y", "MM/DD/YYYY": "%m/%d/%Y", "YYYYMMDD": "%Y%m%d"}
    checked = 0
    for task in env.make_tasks("train", 2, 5, 120):
        m = re.search(r"`(\w+)` column holds dates as YYYY-MM-DD. Rewrite every date as (D Mon YYYY|[DMY/]+)", task.prompt[1]["content"])
        if not m:
            continue
        col, fmt = m.group(1), m.group(2)
        for text, expected in hidden(task):
            lines = text.splitlines()
            idx = lines[0].split(",").index(col)
            rows = sorted((ln.split(",") for ln in lines[1:]), key=lambda v: date.fromisoformat(v[idx]))
            for v in rows:
                d = date.fromisoformat(v[idx])
                v[idx] = f"{d.day} {d.strftime('%b')} {d.year}" if fmt == "D Mon YYYY" else d.strftime(formats[fmt])
            assert "\n".join([lines[0]] + [",".join(v) for v in rows]) + "\n" == expected
            checked += 1
    assert checked >= 30


def test_wrong_and_partial_answers_score_below_one(box):
    tasks = [env.make_tasks("train", lvl, 9, 2)[i] for lvl in env.levels for i in range(2)]
    crlf = [reference(t).replace('"\\n"', '"\\r\\n"') for t in tasks]  # csv.writer's default line end
    example_only = []
    for t in tasks:
        out = t.prompt[1]["content"].split("Expected output for that input:\n```\n")[1].split("```")[0]
        example_only.append(f"```python\ndef transform(text):\n    return {out!r}\n```")
    partial = [lookup_solution(t, 3) for t in tasks]
    wrong_type = ["```python\ndef transform(text):\n    return text.encode()\n```"] * len(tasks)
    completions = crlf + example_only + partial + wrong_type
    scores = verify_all(box, tasks * 4, completions)
    for task, completion, score in zip(tasks * 4, completions, scores):
        assert score.reward < 1.0 and score.verdict == "fail", (completion, score)
    assert all(s.tests_passed == 3 and s.reward == pytest.approx(0.5) for s in scores[2 * len(tasks) : 3 * len(tasks)])
    assert "not str" in scores[-1].error


def test_only_trailing_newlines_are_normalised(box):
    task = env.make_tasks("train", 1, 4, 1)[0]
    ref = json.loads(task.verifier_json)["reference"].replace("def transform(", "def _ref(")
    variants = [
        "    return _ref(text).rstrip('\\n')",  # no final newline: passes
        "    return _ref(text) + '\\n\\n'",  # extra blank lines at the end: passes
        "    return _ref(text).replace('\\n', ' \\n')",  # trailing spaces on lines: fails
        "    return ' ' + _ref(text)",  # leading space: fails
    ]
    completions = [f"```python\n{ref}\ndef transform(text):\n{v}\n```" for v in variants]
    verdicts = [s.verdict for s in verify_all(box, [task] * 4, completions)]
    assert verdicts == ["pass", "pass", "fail", "fail"]


def test_code_outside_a_fence_is_penalised_when_it_earns_something(box):
    task = env.make_tasks("train", 2, 4, 1)[0]
    bare = json.loads(task.verifier_json)["reference"]
    bare_wrong = "def transform(text):\n    return ''\n"
    good, bad = verify_all(box, [task, task], [bare, bare_wrong])
    assert (good.verdict, good.outcome, good.penalty, good.reward) == ("pass", 1.0, -0.1, 0.9)
    assert (bad.verdict, bad.penalty, bad.reward) == ("fail", 0.0, 0.0)


@pytest.mark.parametrize(
    "body, verdict",
    [
        ("no code at all, sorry", "no_code"),
        ("```python\ndef transform(text:\n    return text\n```", "fail"),  # syntax error
        ("```python\ndef transform(text):\n    while True: pass\n```", "timeout"),
        ("```python\nimport sys\nsys.exit(0)\n```", "suspected_hack"),
        ("```python\nprint('{\"passed\": 6, \"total\": 6}')\n```", "suspected_hack"),
        (
            (
                "```python\nclass S(str):\n    def __eq__(self, o): return True\n    def rstrip(self, *a): return self\n"
                "def transform(text):\n    return S('x')\n```"
            ),
            "suspected_hack",
        ),
        ("```python\ndef transform(text):\n    return open('/etc/shadow').read()\n```", "suspected_hack"),
    ],
)
def test_bad_or_hostile_answers_score_zero(box, body, verdict):
    task = env.make_tasks("train", 3, 5, 1)[0]
    (score,) = verify_all(box, [task], [body])
    assert score.reward == 0.0 and score.verdict == verdict, score


def test_a_broken_sandbox_is_an_error_verdict_not_a_crash():
    task = env.make_tasks("train", 1, 0, 1)[0]
    job = env.job(task, reference(task))
    score = env.score(task, job, ExecResult(None, "", "", 0.1, error="bwrap failed: no user namespace"))
    assert (score.reward, score.verdict) == (0.0, "error") and "bwrap failed" in score.error


def test_reference_runs_on_the_example_shown():
    for level in env.levels:
        task = env.make_tasks("train", level, 2, 1)[0]
        text = task.prompt[1]["content"].split("Example input:\n```\n")[1].split("```")[0]
        shown = task.prompt[1]["content"].split("Expected output for that input:\n```\n")[1].split("```")[0]
        assert run_reference(json.loads(task.verifier_json)["reference"], text) == shown


def test_find_code():
    from flywheel.environments.domains.data import find_code

    assert find_code("Sure:\n```python\nimport csv\ndef transform(t):\n    return t\n```\nDone") == (
        "import csv\ndef transform(t):\n    return t\n", True,
    )  # fmt: skip
    assert find_code("Like this:\nimport json\n\ndef transform(t):\n    return t") == (
        "import json\n\ndef transform(t):\n    return t", False,
    )  # fmt: skip
    assert find_code("import this, but no function") == (None, False)
    assert find_code("I cannot do that.") == (None, False)
