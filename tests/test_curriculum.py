"""The curriculum: levels open on measured pass rates; flat levels are sampled less."""

from environments import get_environment
from storage.lake import Lake
from tasks.curriculum import LevelStats, level_stats, open_levels, plan

from .test_lake import make_trajectories


def test_levels_open_in_order_on_the_threshold():
    s = {("code", 1): LevelStats(0.1, 0.5, 10)}
    assert open_levels([1, 2, 3], s, "code", 0.2) == [1]
    s[("code", 1)] = LevelStats(0.25, 0.5, 10)
    assert open_levels([1, 2, 3], s, "code", 0.2) == [1, 2]
    s[("code", 2)] = LevelStats(0.0, 0.0, 4)  # tried, hard: stays open, 3 stays shut
    assert open_levels([3, 1, 2], s, "code", 0.2) == [1, 2]
    assert open_levels([1, 2, 3], s, "math", 0.2) == [1]  # per domain


def test_plan_weights_flat_levels_down_and_sums_to_count():
    s = {("code", 1): LevelStats(0.9, 0.1, 10), ("code", 2): LevelStats(0.3, 0.8, 10)}
    p = plan({"code": [1, 2, 3]}, 10, s, 0.2, 0.1)
    assert sum(p.values()) == 10 and set(p) == {("code", 1), ("code", 2), ("code", 3)}
    assert p[("code", 3)] > p[("code", 2)] > p[("code", 1)]  # untried 1.0 > 0.8 > 0.1
    assert plan({"code": [1, 2, 3], "math": [1, 2, 3]}, 7, {}, 0.2, 0.1) == {("code", 1): 4, ("math", 1): 3}
    assert plan({"code": [1]}, 5, s, 0.2, 0.1) == {("code", 1): 5}


def test_level_stats_from_the_lake(tmp_path):
    env = get_environment("code")
    lake = Lake(str(tmp_path / "lake"))
    t1, t2 = env.make_tasks("train", 1, 0, 2), env.make_tasks("train", 2, 0, 2)
    rewards = {t1[0].task_id: [1, 1], t1[1].task_id: [1, 0], t2[0].task_id: [0, 0], t2[1].task_id: [0, 0]}
    trajs = make_trajectories("r", 0, t1 + t2, rewards)
    for tr in trajs:
        tr.verdict = "pass" if tr.reward == 1 else "fail"
    lake.commit_cycle("r", 0, t1 + t2, trajs)
    s = level_stats(lake, "r", 0, 3)
    assert s[("code", 1)] == LevelStats(0.75, 0.5, 2)  # 3 of 4 samples pass; one group varies
    assert s[("code", 2)] == LevelStats(0.0, 0.0, 2)
    assert level_stats(lake, "r", 5, 3) == {}  # out of the window
    p = plan({"code": [1, 2, 3]}, 8, s, 0.2, 0.1)
    assert p == {("code", 1): 7, ("code", 2): 1}  # level 3 shut: level 2 passes nothing


def test_over_long_prompts_are_quarantined_not_fatal(tmp_path):
    import json

    from transformers import AutoTokenizer

    from flywheel.model_prep import resolve_model
    from tasks.sample import quarantine_long_prompts

    tok = AutoTokenizer.from_pretrained(resolve_model(None, None))
    tasks = get_environment("math").make_tasks("train", 1, 0, 2) + get_environment("data").make_tasks("train", 3, 0, 2)
    path = tmp_path / "q" / "cycle-0.jsonl"
    kept = quarantine_long_prompts(tasks, tok, 300, path)
    assert [t.domain for t in kept] == ["math", "math"]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["domain"] for r in rows] == ["data", "data"] and "max_model_len" in rows[0]["reason"]


def test_fresh_tasks_are_a_seeded_stream_whose_smaller_counts_are_prefixes():
    """The sampler's fresh tasks; bench/vs_trl.py hands TRL the same stream."""
    from collections import Counter

    from environments.registry import Domains
    from tasks.sample import fresh_plan, fresh_tasks

    DOMAINS = Domains(["extraction", "code"])

    full = fresh_plan({"extraction": [1], "code": [1]}, 6)
    assert full == Counter({("extraction", 1): 3, ("code", 1): 3})
    many = {f"d{i}": [1, 2] for i in range(5)}  # more domains than tasks: each cycle the next ones
    assert fresh_plan(many, 3, start=3) == Counter({("d3", 1): 1, ("d4", 1): 1, ("d0", 2): 1})
    a, b = fresh_tasks(DOMAINS, 0, 4, full), fresh_tasks(DOMAINS, 0, 4, full)
    assert [t.task_id for t in a] == [t.task_id for t in b] and {t.split for t in a} == {"train"}
    fewer = fresh_tasks(DOMAINS, 0, 4, Counter({("extraction", 1): 1, ("code", 1): 2}))
    by_cell = lambda ts, d: [t.task_id for t in ts if t.domain == d]  # noqa: E731
    assert by_cell(fewer, "extraction") == by_cell(a, "extraction")[:1]
    assert by_cell(fewer, "code") == by_cell(a, "code")[:2]
    assert {t.task_id for t in fresh_tasks(DOMAINS, 0, 5, full)}.isdisjoint(t.task_id for t in a)


def test_an_evaluation_prior_steers_untried_cells():
    """Cells not tried yet take their weight from the starting policy's evaluation (the
    share of held-out tasks it earned any reward on), floored at min_weight; measured
    cells keep their measured weight."""
    prior = {("code", 1): 0.5, ("math", 1): 0.0}
    p = plan({"code": [1], "math": [1], "data": [1]}, 16, {}, 0.2, 0.1, prior)
    assert p == {("code", 1): 5, ("math", 1): 1, ("data", 1): 10}  # weights 0.5, 0.1 (floor), 1 (no prior)
    measured = {("math", 1): LevelStats(0.5, 1.0, 4)}
    assert plan({"math": [1], "code": [1]}, 4, measured, 0.2, 0.1, prior) == {("math", 1): 3, ("code", 1): 1}
