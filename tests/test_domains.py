"""What every registered domain owes the protocol: tasks deterministic per seed, train and
eval disjoint by content, at least three levels, and bad requests named. Each domain's
own file tests its generator's content and its verifier."""

import pytest

from environments import DOMAINS, get_environment


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
def test_reference_demonstrations_pass_their_own_verifier(domain):
    """A domain's reference reply (the SFT cold start's data) earns the full reward from
    the domain's own verifier, run in the real sandbox; a domain without references says
    so with None for every task."""
    from environments.base import Score
    from environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig

    env = get_environment(domain)
    tasks = [t for lvl in env.levels for t in env.make_tasks("train", lvl, 3, 4)]
    demos = [env.demonstration(t) for t in tasks]
    if domain in ("code", "repair", "terminal"):  # they keep no reference replies (yet)
        assert demos == [None] * len(tasks)
        return
    assert None not in demos
    box = make_sandbox(SandboxConfig(concurrency=2))
    try:
        for task, demo in zip(tasks, demos):
            job = env.verification_job(task, demo)
            score = job if isinstance(job, Score) else env.score(task, job, box.run(job))
            assert (score.verdict, score.reward) == ("pass", 1.0), (task.level, demo[:200], score)
            if domain == "math":  # the same reply with a wrong number fails
                assert env.verification_job(task, demo.replace("Answer: ", "Answer: 1")).verdict == "fail"
    finally:
        box.close()
