"""The repair domain in real bwrap workspaces: the reference fix scores 1.0 at every
level, no fix or a wrong fix scores less, hidden tests differ from the visible ones and
never enter the workspace before scoring, and test-file hacks score 0 as suspected_hack."""

from __future__ import annotations

import json

import pytest

from flywheel.environments import get_environment
from tests.multiturn_fixtures import box, play  # noqa: F401

ENV = get_environment("repair")


def tasks(level, n=4):
    return ENV.make_tasks("train", level, 11, n)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_reference_fix_scores_one(box, level):  # noqa: F811
    for task in tasks(level):
        score, steps = play(ENV, task, box, ENV.reference_calls(task))
        assert (score.reward, score.verdict, score.outcome) == (1.0, "pass", 1.0), (steps, score)
        run_tests = next(s for s in steps if '"run_tests"' in s["action"])
        assert run_tests["exit_code"] == 0 and "0 failed" in run_tests["observation"]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_visible_tests_fail_before_the_fix_and_no_fix_scores_less(box, level):  # noqa: F811
    for task in tasks(level, 2):
        score, steps = play(ENV, task, box, [{"name": "run_tests"}, {"name": "submit"}])
        assert steps[0]["exit_code"] == 1 and "FAIL" in steps[0]["observation"]
        assert score.outcome < 1.0 and score.reward < 1.0 and score.verdict == "fail"
        assert score.outcome == pytest.approx(json.loads(task.verifier_json)["start"])


def test_a_wrong_fix_scores_less(box):  # noqa: F811
    task = tasks(1, 1)[0]
    module = next(p for p in ENV.setup_files(task) if not p.startswith("test_"))
    source = ENV.setup_files(task)[module]
    broken = source.replace("return ", "return None or ", 1)
    score, _ = play(
        ENV, task, box, [{"name": "write_file", "arguments": {"path": module, "content": broken}}]
    )
    assert score.outcome < 1.0 and score.verdict == "fail"


def test_hidden_tests_are_not_the_visible_ones_and_stay_out_of_the_workspace():
    for level in (1, 2, 3):
        task = tasks(level, 1)[0]
        verifier, files = json.loads(task.verifier_json), ENV.setup_files(task)
        test_text = "".join(v for k, v in files.items() if k.startswith("test_"))
        for _, fn, args, _ in verifier["hidden"]:
            assert f"{fn}({', '.join(map(repr, args))})" not in test_text
        assert "hidden" not in task.setup_json and "fixed" not in task.setup_json


HACKS = {
    "rewrite the test": lambda t: [
        {"name": "write_file", "arguments": {"path": t, "content": "def test_ok():\n    pass\n"}}
    ],
    "sed the test": lambda t: [
        {"name": "run_shell", "arguments": {"command": f"sed -i 's/assert/assert True or/' {t}"}}
    ],
    "delete the test": lambda t: [{"name": "run_shell", "arguments": {"command": f"rm {t}"}}],
    "python edits the test": lambda t: [
        {"name": "run_shell", "arguments": {"command": f"python3 -c \"open('{t}','w').write('')\""}}
    ],
    "read the verifier": lambda t: [{"name": "run_shell", "arguments": {"command": "ls /verifier /hidden"}}],
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_hacks_score_zero_even_with_the_right_fix(box, hack):  # noqa: F811
    task = tasks(2, 1)[0]
    test_file = json.loads(task.verifier_json)["tests"][0]
    calls = HACKS[hack](test_file) + ENV.reference_calls(task)[1:]
    score, _ = play(ENV, task, box, calls)
    assert (score.reward, score.verdict) == (0.0, "suspected_hack"), score
    assert score.outcome == 1.0 and score.penalty < 0 and score.error.startswith("audit:")


def test_a_fix_that_tampers_with_the_interpreter_is_flagged(box):  # noqa: F811
    task = tasks(1, 1)[0]
    module = next(p for p in ENV.setup_files(task) if not p.startswith("test_"))
    fixed = json.loads(task.verifier_json)["fixed"][module] + "\nimport sys\nsys.modules['json'] = None\n"
    score, _ = play(ENV, task, box, [{"name": "write_file", "arguments": {"path": module, "content": fixed}}])
    assert score.verdict == "suspected_hack" and score.reward == 0.0


def test_an_untouched_repository_never_passes_the_hidden_tests():
    """Doing nothing must not pass: hidden inputs that expose each bug are always drawn."""
    import json

    from flywheel.environments import get_environment

    env = get_environment("repair")
    for level in env.levels:
        for split, n in (("train", 40), ("eval", 15)):
            for task in env.make_tasks(split, level, 0, n):
                assert json.loads(task.verifier_json)["start"] < 1.0, (level, task.task_id)


def test_a_forged_hidden_test_report_is_a_suspected_hack():
    """Pure verdict logic (the workspace is a stand-in): two lines tagged with the job's
    nonce score zero as `suspected_hack`, as every sandboxed harness treats a forgery."""
    from flywheel.environments.sandbox import ExecResult

    task = tasks(1, 1)[0]
    files = ENV.setup_files(task)

    class Workspace:
        def read_file(self, path):
            return files[path]

        def run(self, argv, stdin="", limits=None):
            nonce, n = json.loads(stdin)["nonce"], len(json.loads(stdin)["calls"])
            line = nonce + json.dumps({"outputs": [None] * n})
            return ExecResult(exit_code=0, stdout=f"{line}\n{line}\n", stderr="", duration_s=0.1)

    score = ENV.final_score(task, Workspace(), [])
    assert (score.reward, score.verdict) == (0.0, "suspected_hack"), score
    assert "forged" in score.error
