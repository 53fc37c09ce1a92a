"""The statistics every evaluation reports: Wilson intervals and paired bootstrap differences."""

import random

import pytest

from flywheel.reports.stats import paired, seeds_paired, unpaired, wilson


def test_wilson_matches_known_values_and_stays_in_bounds():
    lo, hi = wilson(8, 16)
    assert (round(lo, 4), round(hi, 4)) == (0.28, 0.72)  # the textbook 95% Wilson interval for 8/16
    assert wilson(0, 10)[0] == 0.0 and 0.25 < wilson(0, 10)[1] < 0.35  # not "0 +/- 0"
    assert wilson(10, 10)[1] == 1.0 and wilson(10, 10)[0] > 0.65
    assert wilson(0, 0) == (0.0, 1.0)
    half_width = [(wilson(n // 2, n)[1] - wilson(n // 2, n)[0]) / 2 for n in (16, 100, 400)]
    assert half_width[0] > 0.2 and 0.09 < half_width[1] < 0.1 and half_width[2] < 0.05


def test_paired_difference_resolves_a_real_gain_and_not_noise():
    rng = random.Random(1)
    ids = [f"t{i}" for i in range(200)]
    a = {i: int(rng.random() < 0.3) for i in ids}
    better = {i: max(a[i], int(rng.random() < 0.3)) for i in ids}  # solves what a solved, and more
    d = paired(a, better)
    assert d.resolvable and d.low > 0 and d.n == 200 and "no resolvable" not in d.describe()
    same = {i: a[i] if rng.random() < 0.9 else 1 - a[i] for i in ids}  # a few flips both ways
    noise = paired(a, same)
    assert noise.low < 0 < noise.high and "no resolvable difference" in noise.describe()


def test_paired_uses_only_shared_tasks_and_cells_stratify():
    a = {"x": 1, "y": 0, "z": 1}
    b = {"x": 1, "y": 1, "w": 0}
    d = paired(a, b, cells={"x": "c1", "y": "c2"})
    assert d.n == 2 and d.diff == pytest.approx(0.5)
    with pytest.raises(ValueError, match="share no task"):
        paired({"a": 1}, {"b": 1})


def test_unpaired_for_runs_of_different_seeds():
    d = unpaired([0.30, 0.32, 0.31], [0.40, 0.42, 0.41])
    assert d.resolvable and d.diff == pytest.approx(0.1)
    assert not unpaired([0.3, 0.5, 0.1], [0.32, 0.12, 0.5]).resolvable


def test_seeds_paired_counts_the_spread_between_seeds():
    """Three seeds a side on the same 60 tasks: a gain every seed shows resolves; the same
    mean gain carried by one lucky seed does not, though pooling the seeds' tasks as if
    they were independent pairs would call it resolved."""
    rng = random.Random(1)
    tasks = [f"t{i}" for i in range(60)]
    base = {t: int(rng.random() < 0.4) for t in tasks}

    def run(gain: float, r: random.Random) -> dict:
        return {t: 1 if base[t] or r.random() < gain else 0 for t in tasks}

    a = [run(0.0, random.Random(s)) for s in range(3)]
    steady = seeds_paired(a, [run(0.3, random.Random(9 + s)) for s in range(3)])
    assert steady.resolvable and steady.low > 0 and steady.n == 60
    lucky = [run(0.9, random.Random(20)), run(0.0, random.Random(21)), run(0.0, random.Random(22))]
    one_seed = seeds_paired(a, lucky)
    assert one_seed.diff > 0.15 and not one_seed.resolvable, one_seed
    pooled_a = {f"{s}/{t}": a[s][t] for s in range(3) for t in tasks}
    pooled_b = {f"{s}/{t}": lucky[s][t] for s in range(3) for t in tasks}
    assert paired(pooled_a, pooled_b).resolvable  # what ignoring the seeds would have claimed
    with pytest.raises(ValueError, match="share no evaluated task"):
        seeds_paired([{"x": 1}], [{"y": 0}])


def test_cells_of_one_task_are_pooled_not_frozen():
    """One task per (domain, level): stratifying on cells of one would give every resample
    the same mean, an interval of width 0. Pooled, one task gained in 51 spans 0."""
    a = {f"t{i}": 0 for i in range(51)}
    b = {**a, "t0": 1}
    p = paired(a, b, cells={f"t{i}": f"cell{i}" for i in range(51)})
    assert p.low < 0.0 < p.high and p.low <= p.diff <= p.high


def test_pass_fail_pairs_that_all_moved_alike_get_an_honest_interval():
    """14 tasks failed by one policy and passed by the other: every resample of the
    differences is +1, so the bootstrap alone said "+100 to +100". Newcombe's paired
    interval (checked by hand: Wilson 0/14 is [0, 0.2153]) gives [1 - 0.3045, 1]."""
    a, b = {f"t{i}": 0 for i in range(14)}, {f"t{i}": 1 for i in range(14)}
    p = paired(a, b)
    assert p.diff == 1.0 and p.high == 1.0 and p.low == pytest.approx(0.6955, abs=1e-3) and p.resolvable
    same = paired(a, dict(a))
    assert same.low < 0 < same.high  # no pairs differ: not "0 to 0" either
    reward = paired({"x": 0.2, "y": 0.4}, {"x": 0.3, "y": 0.5})  # not pass/fail: the bootstrap's alone
    assert reward.low == pytest.approx(0.1) and reward.high == pytest.approx(0.1)


def test_the_run_line_names_the_version_it_compares_against():
    """After a cold start the run's first evaluated version is v1, not v0 (the line said v0)."""
    from flywheel.flows.flywheel import eval_line
    from flywheel.reports.results import EvalResult

    group = {"group": "held-out", "n": 96, "pass@1": 0.49, "ci_low": 0.39, "ci_high": 0.59}
    change = {
        "group": "held-out",
        "diff": 0.042,
        "ci_low": 0.01,
        "ci_high": 0.083,
        "resolvable": True,
        "n": 96,
    }
    result = EvalResult(
        run_id="r", policy_version=5, rows=[], groups=[group], vs_base=[change], base_version=1
    )
    assert "(+4.2 pts vs v1, CI +1.0 to +8.3)" in eval_line(result)


def test_zero_variance_bench_gives_the_ratio_of_shares_an_interval():
    """bench/zero_variance.py: the issue's target is a ratio ("half of uniform's share or
    less"), so the ratio gets its own interval: resolved below one half with 300 groups a
    side, not with 10."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "zero_variance", Path(__file__).parents[1] / "bench" / "zero_variance.py"
    )
    zv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zv)
    est, lo, hi = zv.ratio([1] * 180 + [0] * 120, [1] * 60 + [0] * 240)
    assert abs(est - 1 / 3) < 1e-9 and lo < 1 / 3 < hi < 0.5
    est, lo, hi = zv.ratio([1] * 6 + [0] * 4, [1] * 2 + [0] * 8)
    assert abs(est - 1 / 3) < 1e-9 and hi > 0.5
