"""The terminal domain in real bwrap workspaces: reference solutions score 1.0 at every
level and family, doing nothing or the wrong thing scores less, generation is
deterministic, and reading verifier paths is flagged."""

from __future__ import annotations

import random

import pytest

from flywheel.environments import get_environment
from flywheel.environments.domains.terminal import FAMILIES, evaluate
from tests.multiturn_fixtures import box, play  # noqa: F401

ENV = get_environment("terminal")


def tasks_covering_all_families(level):
    names = {f.__name__ for f in FAMILIES[level]}
    found = {}
    for seed in range(40):
        for task in ENV.make_tasks("train", level, seed, 2):
            found.setdefault(family_of(task), task)
        if names <= set(found):
            break
    return [found[n] for n in sorted(names)]


def family_of(task):
    key = ENV.generate(task.level, random.Random(task.seed)).key
    return key.split(":")[0]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_reference_solution_scores_one_for_every_family(box, level):  # noqa: F811
    tasks = tasks_covering_all_families(level)
    assert len(tasks) == 3
    for task in tasks:
        score, steps = play(ENV, task, box, ENV.reference_calls(task))
        assert (score.reward, score.verdict, score.outcome) == (1.0, "pass", 1.0), (
            task.prompt[1],
            steps,
            score,
        )
        assert score.process == pytest.approx(0.3)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_doing_nothing_or_the_wrong_thing_scores_less(box, level):  # noqa: F811
    task = ENV.make_tasks("train", level, 7, 1)[0]
    idle, _ = play(ENV, task, box, [{"name": "submit"}])
    assert idle.reward < 1.0 and idle.verdict == "fail"
    wrong, steps = play(
        ENV, task, box, [{"name": "run_shell", "arguments": {"command": "rm -rf ./* ; no-such-cmd"}}]
    )
    assert wrong.outcome < 1.0 and wrong.reward < 1.0 and steps[0]["exit_code"] != 0


def test_the_solution_stays_out_of_the_setup():  # determinism and splits: test_domains.py
    a = ENV.make_tasks("train", 2, 3, 5)
    assert "solution" not in a[0].setup_json and "tools" in a[0].prompt[0]["content"]


def test_checks_on_states_and_progress_start():
    checks = [["file", "a/b.txt", "x\n"], ["dir", "a"], ["absent", "c"]]
    assert evaluate(checks, {"files": {"a/b.txt": "x\n"}, "dirs": []}) == [True, True, True]
    assert evaluate(checks, {"files": {"c": ""}, "dirs": []}) == [False, False, False]


def test_reading_verifier_paths_is_flagged(box):  # noqa: F811
    task = ENV.make_tasks("train", 1, 0, 1)[0]
    calls = [
        {"name": "run_shell", "arguments": {"command": "cat /verifier/checks.json"}}
    ] + ENV.reference_calls(task)
    score, _ = play(ENV, task, box, calls)
    assert score.reward == 0.0 and score.verdict == "suspected_hack" and score.penalty < 0


def test_an_untouched_workspace_never_passes():
    import json

    from flywheel.environments import get_environment

    env = get_environment("terminal")
    for level in env.levels:
        for split in ("train", "eval"):
            assert all(json.loads(t.verifier_json)["start"] < 1.0 for t in env.make_tasks(split, level, 1, 30))
