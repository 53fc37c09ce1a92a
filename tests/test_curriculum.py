"""The curriculum: levels open on measured pass rates; flat levels are sampled less."""

import shutil
import time
from collections import Counter

from flywheel.environments import get_environment
from flywheel.storage.lake import Lake
from flywheel.tasks.curriculum import LevelStats, level_stats, open_levels, plan

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
    # committed cycles are cached per process: a run deleted and made anew is read anew
    time.sleep(0.05)  # a new marker mtime (a real new run is seconds later)
    shutil.rmtree(tmp_path / "lake")
    for tr in trajs:
        tr.reward, tr.verdict = 1.0, "pass"
    lake.commit_cycle("r", 0, t1 + t2, trajs)
    assert level_stats(lake, "r", 0, 3)[("code", 2)] == LevelStats(1.0, 0.0, 2)
    ones = make_trajectories("r", 1, t1, {t.task_id: [1, 1] for t in t1})
    for tr in ones:
        tr.verdict = "pass"
    lake.commit_cycle("r", 1, t1, ones)
    assert level_stats(lake, "r", 1, 3)[("code", 1)] == LevelStats(1.0, 0.0, 4)  # both cycles summed
    assert level_stats(lake, "r", 1, 1)[("code", 1)] == LevelStats(1.0, 0.0, 2)
    p = plan({"code": [1, 2, 3]}, 8, s, 0.2, 0.1)
    assert p == {("code", 1): 7, ("code", 2): 1}  # level 3 shut: level 2 passes nothing


def test_over_long_prompts_are_quarantined_not_fatal(tmp_path):
    import json

    from transformers import AutoTokenizer

    from flywheel.run.model_prep import resolve_model
    from flywheel.tasks.sample import quarantine_long_prompts

    tok = AutoTokenizer.from_pretrained(resolve_model(None, None))
    tasks = get_environment("math").make_tasks("train", 1, 0, 2) + get_environment("data").make_tasks(
        "train", 3, 0, 2
    )
    path = tmp_path / "q" / "cycle-0.jsonl"
    kept = quarantine_long_prompts(tasks, tok, 300, path)
    assert [t.domain for t in kept] == ["math", "math"]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["domain"] for r in rows] == ["data", "data"] and "max_model_len" in rows[0]["reason"]


def test_fresh_tasks_are_a_seeded_stream_whose_smaller_counts_are_prefixes():
    """The sampler's fresh tasks; bench/vs_trl.py hands TRL the same stream."""
    from collections import Counter

    from flywheel.environments.registry import Domains
    from flywheel.tasks.sample import fresh_plan, fresh_tasks

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


def _simulate(choose, arms: int = 300, good: int = 20, cycles: int = 40, window: int = 40) -> float:
    """Zero-variance share of `cycles` x 8 groups when `choose(stats, cycle)` picks the
    arms: `good` arms give a group with variance 80% of the time, the rest 2%."""
    import random

    from flywheel.tasks.curriculum import LevelStats

    rng = random.Random(7)
    p = {(f"rg/d{i}", 1): 0.8 if i < good else 0.02 for i in range(arms)}
    history: list[tuple[int, tuple, int]] = []
    flat = total = 0
    for cycle in range(cycles):
        seen: dict = {}
        for c_cycle, cell, informative in history:
            if c_cycle > cycle - 1 - window:
                seen.setdefault(cell, []).append(informative)
        stats = {c: LevelStats(0.5, sum(v) / len(v), len(v)) for c, v in seen.items()}
        for cell, n in choose(stats, cycle).items():
            for _ in range(n):
                informative = int(rng.random() < p[cell])
                history.append((cycle, cell, informative))
                flat, total = flat + 1 - informative, total + 1
    return flat / total


def test_thompson_spends_hundreds_of_arms_where_groups_vary():
    """300 arms, 20 with signal, 8 tasks a cycle for 40 cycles (simulated groups), with a
    starting evaluation of 2 greedy tasks an arm as the prior: the Beta-posterior draw
    ends with under half uniform's share of zero-variance groups, where the proportional
    rule's floor keeps spending on flat arms; without the prior it still beats that rule."""
    import random

    from flywheel.tasks.curriculum import allot, cell_weights, thompson

    levels = {f"rg/d{i}": [1] for i in range(300)}
    cells = sorted((d, 1) for d in levels)
    rng = random.Random(3)
    prior = {
        (f"rg/d{i}", 1): sum(rng.random() < (0.5 if i < 20 else 0.03) for _ in range(2)) / 2
        for i in range(300)
    }
    uniform = _simulate(lambda s, c: Counter(cells[(c * 8 + i) % 300] for i in range(8)))
    proportional = _simulate(lambda s, c: allot(cell_weights(levels, s, 0.2, 0.1, prior), 8, seed=c))
    drawn = _simulate(lambda s, c: thompson(levels, 8, s, 0.2, 2.0, prior, seed=c)[0])
    assert uniform > 0.9 and drawn < uniform / 2 and drawn < proportional - 0.2, (
        uniform,
        proportional,
        drawn,
    )
    blind = _simulate(lambda s, c: thompson(levels, 8, s, 0.2, 2.0, seed=c)[0])
    assert blind < _simulate(lambda s, c: allot(cell_weights(levels, s, 0.2, 0.1), 8, seed=c)) - 0.05


def test_thompson_follows_the_starting_evaluation_backs_off_flat_arms_and_mixes():
    from flywheel.tasks.curriculum import LevelStats, thompson

    levels = {"a": [1], "b": [1], "c": [1]}
    prior = {("a", 1): 1.0, ("b", 1): 0.0, ("c", 1): 0.0}
    fresh, means = thompson(levels, 200, {}, 0.2, 2.0, prior, seed=1)
    assert fresh[("a", 1)] > 150 and means[("a", 1)] > means[("b", 1)]
    assert thompson(levels, 8, {}, 0.2, 2.0, prior, seed=3) == thompson(
        levels, 8, {}, 0.2, 2.0, prior, seed=3
    )
    flat = {("a", 1): LevelStats(1.0, 0.0, 30)}  # measured: every group alike, whatever the prior said
    backed_off, _ = thompson(levels, 200, flat, 0.2, 2.0, prior, seed=1)
    assert backed_off[("a", 1)] < 0.75 * fresh[("a", 1)] and backed_off[("b", 1)] + backed_off[("c", 1)] > 50
    mixed, _ = thompson(levels, 200, flat, 0.2, 2.0, prior, mix={"c": 5.0}, seed=1)
    assert mixed[("c", 1)] > 1.5 * mixed[("b", 1)]


def test_thompson_caps_any_arm_share_of_a_cycle():
    """One arm whose posterior dominates takes every task uncapped; with max_share 0.25 it
    takes 2 of 8 and the rest spread over others."""
    from flywheel.tasks.curriculum import LevelStats, thompson

    levels = {f"d{i}": [1] for i in range(10)}
    stats = {
        ("d0", 1): LevelStats(0.5, 1.0, 40),
        **{(f"d{i}", 1): LevelStats(0.0, 0.0, 40) for i in range(1, 10)},
    }
    uncapped, _ = thompson(levels, 8, stats, 0.2, 2.0, seed=1)
    capped, _ = thompson(levels, 8, stats, 0.2, 2.0, seed=1, max_share=0.25)
    assert uncapped[("d0", 1)] == 8 and capped[("d0", 1)] == 2 and sum(capped.values()) == 8
    assert thompson(levels, 3, stats, 0.2, 2.0, seed=1, max_share=0.01)[0][("d0", 1)] == 1  # at least one


def test_the_evaluation_prior_backs_off_cells_sft_saturated_as_well_as_cells_without_signal():
    """After SFT the starting evaluation solves some cells outright: their groups of 8 will
    mostly all pass, so the prior is low there as it is where nothing earned reward, and the
    first cycle goes to the cell in between (the proof recipe's shape: code 32/32, math 0/32,
    data 24/32)."""
    from flywheel.tasks.curriculum import thompson, variance_chance

    code, math, data = (
        variance_chance(32, 32, 1.0, 8),
        variance_chance(32, 0, 0.03, 8),
        variance_chance(32, 24, 0.8, 8),
    )
    assert code < 0.15 and math == 0.03 and data > 0.75
    assert variance_chance(32, 31, 1.0, 1) < variance_chance(
        32, 31, 1.0, 8
    )  # more samples, more chance to differ
    prior = {("code", 1): code, ("math", 1): math, ("data", 1): data}
    fresh, _ = thompson({"code": [1], "math": [1], "data": [1]}, 200, {}, 0.2, 2.0, prior, seed=1)
    assert fresh[("data", 1)] > 120 and fresh[("data", 1)] > fresh[("code", 1)] + fresh[("math", 1)]
