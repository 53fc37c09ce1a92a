"""reasoning-gym's generators as domains (environments/sources/rg.py): the same tasks in every
process, references that score 1.0 in the real bubblewrap sandbox, scoring of model text
only there, globs and mixing weights, and a sampler fit for hundreds of arms."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from flywheel.environments.sources import rg
from flywheel.environments.registry import DomainError, Domains, expand, mixture
from flywheel.tasks.curriculum import LevelStats, plan

SAMPLE = ["basic_arithmetic", "n_queens", "countdown", "arc_agi", "word_ladder", "isomorphic_strings", "rush_hour",
          "boxnet"]  # fmt: skip


def _tasks_in_a_process(hashseed: str, names: list[str]) -> list:
    code = (
        "import json, sys\nfrom flywheel.environments.registry import get_environment\n"
        "out = []\nfor n in sys.argv[1:]:\n"
        "    for t in get_environment('rg/' + n).make_tasks('train', 1, 7, 3):\n"
        "        out.append([t.task_id, t.prompt[0]['content'], t.verifier_json])\n"
        "print(json.dumps(out))"
    )
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    done = subprocess.run([sys.executable, "-c", code, *names], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_catalogue_covers_every_generator_and_says_why_one_is_out():
    from reasoning_gym.factory import DATASETS

    cat = rg.catalogue()["generators"]
    assert set(cat) == set(DATASETS)
    inside = rg.included()
    assert len(inside) >= 80, len(inside)
    for name, g in cat.items():
        assert g["status"] in ("in", "out") and (g["status"] == "in") == bool(g["levels"] and not g["reason"]), name
    with pytest.raises(DomainError, match="knight_swap"):
        Domains(["rg/knight_swap"])  # fails at every level in 0.1.25: out, with its reason


def test_tasks_are_the_same_in_every_process_whatever_its_hash_seed():
    """Some generators iterate sets (their items change with PYTHONHASHSEED); the
    helper always generates at one hash seed, so two processes agree."""
    hash_dependent = sorted(n for n, g in rg.included().items() if g["hash_dependent"])
    assert hash_dependent, "the survey found no hash-dependent generator: is the check still live?"
    names = ["basic_arithmetic", *hash_dependent[:3]]
    a, b = _tasks_in_a_process("1", names), _tasks_in_a_process("2", names)
    assert len(a) == 3 * len(names) and a == b


@pytest.fixture(scope="module")
def box():
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig

    sandbox = make_sandbox(SandboxConfig(concurrency=2), ("import reasoning_gym",))
    yield sandbox
    sandbox.close()


def test_references_score_one_in_the_sandbox_and_wrong_answers_nothing(box):
    from flywheel.tasks.score import verify

    names = [n for n in SAMPLE if n in rg.included()]
    assert {"basic_arithmetic", "n_queens", "countdown"} <= set(names)
    envs = [Domains([f"rg/{n}"])[f"rg/{n}"] for n in names]
    tasks = [(e, t) for e in envs for lvl in e.levels[:2] for t in e.make_tasks("train", lvl, 3, 2)]
    assert len(tasks) == 4 * len(envs)
    right = verify(box, [(e, t, f"Thinking.\n{e.reference(t)[0]['content']}") for e, t in tasks])
    assert [(v.score.verdict, v.score.reward) for v in right] == [("pass", 1.0)] * len(tasks), [v.score for v in right]
    wrong = verify(box, [(e, t, "<answer>not it</answer>") for e, t in tasks])
    assert {v.score.reward for v in wrong} == {0.0}  # countdown's 0.01 for a malformed answer counts as 0
    untagged = verify(box, [(e, t, "the answer is 4") for e, t in tasks])
    assert {v.score.verdict for v in untagged} == {"no_code"}


def test_generators_that_give_no_answer_get_a_witness_of_ours_and_no_credit_for_a_shortcut(box):
    """boxnet, graph_color, propositional_logic, rubiks_cube and rush_hour check a
    solution's validity and give no answer: our witness (found by search for rush_hour
    and boxnet) is the reference and scores 1.0 through the sandbox; propositional_logic's
    0.25 for a tautology, which any answer can earn, counts as 0."""
    from reasoning_gym.factory import DATASETS

    from flywheel.environments.sources.rg_witness import witness
    from flywheel.tasks.score import verify

    names = ["boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"]
    for name in names:
        assert DATASETS[name][0](DATASETS[name][1](seed=1, size=1))[0]["answer"] is None, name  # still none
    assert witness("basic_arithmetic", {"metadata": {}}) is None
    envs = [Domains([f"rg/{n}"])[f"rg/{n}"] for n in names]
    tasks = [(e, t) for e in envs for t in e.make_tasks("train", e.levels[-1], 4, 2)]
    assert len(tasks) == 2 * len(names)
    right = verify(box, [(e, t, e.reference(t)[0]["content"]) for e, t in tasks])
    assert [v.score.reward for v in right] == [1.0] * len(tasks), [v.score for v in right]
    logic = envs[2]
    shortcut = verify(box, [(logic, t, "<answer>(P ∨ ¬P)</answer>") for t in logic.make_tasks("train", 1, 4, 4)])
    assert [v.score.reward for v in shortcut] == [0.0] * 4 and shortcut[0].score.outcome == 0.0


def test_model_text_is_evaluated_only_in_the_sandbox(box, tmp_path):
    """n_queens's scorer eval()s the answer: that happens in the sandbox (the host file
    is never written), where its eval is a literal reader (environments/parsing/safe_parse.py;
    tests/test_scorer_isolation.py tries the attack forms), code-like answers are refused
    before they get there, and the flow's process never imports reasoning_gym at all
    (generation is the helper's)."""
    from flywheel.environments.sandbox import Job

    env = Domains(["rg/n_queens"])["rg/n_queens"]
    task = env.make_tasks("train", 1, 3, 1)[0]
    marker = tmp_path / "pwned"
    attack = f"__import__('pathlib').Path('{marker}').touch()"
    assert env.job(task, f"<answer>{attack}</answer>").verdict == "suspected_hack"
    # had the audit missed it, the scorer reads it as a literal, in the sandbox
    spec = {**json.loads(task.verifier_json), "answer": attack, "nonce": "n0nce"}
    job = Job(["python", "-I", "-c", rg.HARNESS], stdin=json.dumps(spec))
    assert env.score(task, job, box.run(job)).reward == 0.0 and not marker.exists()
    code = (
        "import sys\nfrom flywheel.environments.registry import get_environment\nfrom flywheel.environments.sources.rg import answer_job\n"
        "e = get_environment('rg/n_queens')\nt = e.make_tasks('train', 1, 3, 1)[0]\n"
        "answer_job(__import__('json').loads(t.verifier_json), '<answer>x</answer>')\n"
        "print('reasoning_gym' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_generator_that_does_not_answer_in_time_is_skipped_not_waited_for(monkeypatch, caplog):
    env = rg.ReasoningGym("basic_arithmetic")
    monkeypatch.setattr(rg, "REQUEST_TIMEOUT_S", 0.01)  # less than the helper's start-up
    monkeypatch.setattr(rg, "HELPER", rg.Helper())
    assert env.make_tasks("train", 1, 99, 2) == [] and "skipped" in caplog.text
    monkeypatch.setattr(rg, "REQUEST_TIMEOUT_S", 60)
    assert len(env.make_tasks("train", 1, 99, 2)) == 2  # a fresh helper next time
    rg.HELPER.close()


def test_globs_select_by_name_and_category_and_weights_mix_them():
    inside = rg.included()
    algorithmic = expand("rg/algorithmic/*")
    assert algorithmic == sorted(f"rg/{n}" for n, g in inside.items() if g["category"] == "algorithmic")
    assert len(expand("rg/*")) == len(inside) and "code" not in expand("rg/*")
    mix = mixture(["code", "rg/arithmetic/*"], {"rg/arithmetic/*": 2.0})
    arithmetic = expand("rg/arithmetic/*")
    assert mix["code"] == 1.0 and sum(mix[d] for d in arithmetic) == pytest.approx(2.0)
    with pytest.raises(DomainError, match="matches no domain"):
        expand("rg/no_such_category/*")
    with pytest.raises(DomainError, match="not in sampler.domains"):
        mixture(["code"], {"math": 1.0})


def test_flywheel_domains_lists_the_rg_domains():
    from typer.testing import CliRunner

    from flywheel.cli import app

    out = CliRunner().invoke(app, ["domains", "--set", 'sampler.domains=["rg/arithmetic/*"]'])
    assert out.exit_code == 0, out.output
    assert "rg/basic_arithmetic" in out.output and "reasoning-gym 0.1.25 (arithmetic)" in out.output


def test_the_seeded_plan_spreads_a_few_tasks_over_hundreds_of_arms_by_weight():
    """300 arms, 8 tasks a cycle: every arm with signal is reached, each as often as its
    weight says (largest remainder alone would pick the first eight every cycle)."""
    levels = {f"rg/d{i}": [1, 2, 3] for i in range(100)}
    stats = {(f"rg/d{i}", 1): LevelStats(0.5, 1.0, 4) for i in range(100)}  # passes: level 2 opens
    stats.update({(f"rg/d{i}", 2): LevelStats(0.0, 0.0, 4) for i in range(50)})  # flat: 0.1, level 3 shut
    stats.update({(f"rg/d{i}", 2): LevelStats(0.5, 1.0, 4) for i in range(50, 100)})  # level 3 opens, untried
    visits: Counter = Counter()
    for cycle in range(400):
        p = plan(levels, 8, stats, 0.2, 0.1, seed=cycle)
        assert sum(p.values()) == 8
        visits.update(p)
    lively = [(f"rg/d{i}", 1) for i in range(100)] + [(f"rg/d{i}", lvl) for i in range(50, 100) for lvl in (2, 3)]
    assert all(visits[c] > 0 for c in lively) and len(lively) == 200
    flat = sum(visits[(f"rg/d{i}", 2)] for i in range(50)) / 50
    assert 5 < sum(visits[c] for c in lively) / len(lively) / flat < 20  # weights 1.0 vs 0.1
    assert plan(levels, 8, stats, 0.2, 0.1, seed=3) == plan(levels, 8, stats, 0.2, 0.1, seed=3)


def test_the_per_domain_picture_and_the_arms_table():
    from flywheel.reports.summary import domains_png
    from flywheel.tasks.curriculum import arm_rows, cell_weights

    rows = [("rg/a", 0, 0.0), ("rg/a", 1, 0.5), ("rg/b", 1, 1.0)]
    assert domains_png(rows, "t")[:8] == b"\x89PNG\r\n\x1a\n" and domains_png(rows[:2], "t") is None
    stats = {("rg/a", 1): LevelStats(1.0, 0.0, 4)}
    weights = cell_weights({"rg/a": [1], "rg/b": [1]}, stats, 0.2, 0.1, mix={"rg/a": 1.0, "rg/b": 3.0})
    table = arm_rows(weights, stats, Counter({("rg/b", 1): 8}))
    assert [(r["domain"], r["groups"], r["share"], r["tasks"]) for r in table] == [
        ("rg/a", 4, round(0.1 / 3.1, 4), 0), ("rg/b", 0, round(3 / 3.1, 4), 8)]  # fmt: skip
