"""The curriculum: which domains and levels this cycle's fresh tasks come from, decided by
pass rates measured in the lake.

Two rules, both computed from the last `window_cycles` committed cycles of the run:

- a level opens when the level below it passes at least `open_threshold` of its tasks'
  samples there (level 1, or the lowest level configured, is always open; a level once
  seen open stays open, since its rows remain in the window or it was already passed);
- among open levels, a (domain, level) whose groups all score alike (every sample of a
  task got the same reward: nothing for GRPO to learn from) is sampled less: its weight
  is the share of its groups with reward variance, floored at `min_weight`; a level not
  tried yet has weight 1, or, when the run evaluated its starting policy
  (eval.before_and_after, or `flywheel eval` of that version), the chance its evaluation
  suggests that a group varies (`eval_prior`): low where the model earned no reward and
  where it solved every task, so a first cycle spends its samples neither where the
  model has no signal nor where SFT already taught the cell.

A cell's weight is also multiplied by its domain's mixing weight (sampler.weights). Fresh
tasks are then split across the weighted (domain, level) cells: whole parts first, the
rest drawn by a seeded weighted draw (the cycle's seed), so that hundreds of cells (the
rg/* domains) with a handful of tasks a cycle are each sampled in proportion to their
weight.

With hundreds of arms that proportional rule spends too much on arms known to be flat:
a hundred arms at the 0.1 floor weigh as much as ten arms with signal, so about half the
tasks go where nothing is learnt (measured, bench/README.md 2026-12-03).
`curriculum.strategy: thompson` makes each arm a Beta posterior on "a group of this arm
has reward variance" (its measured groups, on a prior of `prior_strength` groups' worth:
from the starting evaluation where the run has one, else the share of informative groups
over all arms measured so far, so that with 300 arms an untried one is not presumed as
promising as one that has shown signal) and gives each task to the arm with the highest
draw (times its mixing weight), no arm more than `max_arm_share` of a cycle: arms seen
flat are drawn rarely, without a floor to tune. Per-task choices (which failures come
back) belong to the replay policy, not here. Not done: cross-domain transfer estimates,
or closing a level.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

import duckdb

from flywheel.storage.lake import Lake
from flywheel.storage.query import GROUPS_VIEW

# Per committed cycle and arm: sums, so that any window is the sum of its cycles' rows.
ARM_CYCLES_SQL = """
SELECT cycle, domain, level, sum(pass_rate) AS pass_sum, sum(informative) AS informative, count(*) AS groups
FROM groups WHERE split = 'train' GROUP BY cycle, domain, level
"""

# (lake root, run, cycle, commit stamp) -> {(domain, level): (pass sum, informative, groups)}.
# A committed cycle never changes (a run made anew gets new stamps), so each is read once
# per process: a long run's sampler opens only the newest cycle's files, not the window's.
_ARM_CYCLES: dict[tuple, dict[tuple[str, int], tuple[float, float, int]]] = {}


@dataclass
class LevelStats:
    pass_rate: float
    informative: float  # share of groups with reward variance
    groups: int


def level_stats(lake: Lake, run_id: str, cycle: int, window: int) -> dict[tuple[str, int], LevelStats]:
    """Measured (domain, level) stats over cycles (cycle - window, cycle]: one query over
    the cycles not read before in this process (ARM_CYCLES_SQL), the rest from memory."""
    stamps = {c: t for c, t in lake.commit_stamps(run_id).items() if cycle - window < c <= cycle}
    keys = {c: (lake.root, run_id, c, t) for c, t in stamps.items()}
    missing = [c for c, k in keys.items() if k not in _ARM_CYCLES]
    if missing:
        con = duckdb.connect()
        con.register("trajectories", lake.dataset("trajectories", run_id, missing))
        con.execute(GROUPS_VIEW)
        read: dict[int, dict[tuple[str, int], tuple]] = {c: {} for c in missing}
        for c, d, lvl, p, i, g in con.execute(ARM_CYCLES_SQL).fetchall():
            read[c][(d, lvl)] = (p, i, g)
        for c in missing:
            _ARM_CYCLES[keys[c]] = read[c]
    sums: dict[tuple[str, int], list[float]] = {}
    for k in keys.values():
        for cell, row in _ARM_CYCLES[k].items():
            acc = sums.setdefault(cell, [0.0, 0.0, 0])
            for j, v in enumerate(row):
                acc[j] += v
    return {cell: LevelStats(p / g, i / g, int(g)) for cell, (p, i, g) in sums.items()}


def forget_cycles(cycle: int | None = None) -> None:
    """Drop the per-cycle cache, or one cycle's entries (benches time the query with it)."""
    for k in [k for k in _ARM_CYCLES if cycle is None or k[2] == cycle]:
        del _ARM_CYCLES[k]


def open_levels(
    levels: list[int], stats: dict[tuple[str, int], LevelStats], domain: str, threshold: float
) -> list[int]:
    """The configured levels of `domain` open now: the lowest, and each whose predecessor
    passes `threshold` (or was itself measured, so it opened earlier)."""
    levels = sorted(levels)
    opened = levels[:1]
    for below, level in zip(levels, levels[1:]):
        seen = stats.get((domain, level))
        passed = stats.get((domain, below))
        if seen is not None or (passed is not None and passed.pass_rate >= threshold):
            opened.append(level)
        else:
            break
    return opened


def eval_prior(lake: Lake, run_id: str, version: int, k: int = 8) -> dict[tuple[str, int], float]:
    """Per (domain, level), the chance a group of `k` samples has reward variance, as the
    policy `version`'s (or the latest evaluated one before it) greedy held-out evaluation
    suggests (`variance_chance`). Empty when the run has no evaluation."""
    from flywheel.storage import evals

    con = evals.connect(lake, run_id)
    # an aggregate: always one row
    [(latest,)] = con.execute("SELECT max(policy_version) FROM eval_cells WHERE mode = 'greedy' AND "
                              "policy_version <= ?", [version]).fetchall()  # fmt: skip
    if latest is None:
        return {}
    rows = con.execute("SELECT domain, level, tasks, solved, with_reward FROM eval_cells "
                       "WHERE mode = 'greedy' AND policy_version = ?", [latest]).fetchall()  # fmt: skip
    return {(d, lvl): variance_chance(n, solved, share, k) for d, lvl, n, solved, share in rows}


def variance_chance(tasks: int, solved: int, with_reward: float, k: int) -> float:
    """Both ends of "nothing to learn" from one greedy evaluation of a cell. Where the
    policy earned no reward, a group's samples will most likely all score 0: the share of
    tasks with any reward bounds the chance from above. Where it solves every task (a cell
    SFT has saturated), all `k` samples most likely pass: with a per-sample pass chance p
    (the solved share, smoothed by half a task each way so that 32 of 32 is not certainty)
    a group has variance with chance at most 1 - p**k. Greedy passes more often than
    sampling at temperature 1, so this is a prior for the posterior to correct, not a
    measurement."""
    p = (solved + 0.5) / (tasks + 1)
    return min(with_reward, 1 - p**k)


def cell_weights(levels: dict[str, list[int]], stats: dict, threshold: float, min_weight: float,
                 prior: dict | None = None, mix: dict[str, float] | None = None) -> dict[tuple[str, int], float]:  # fmt: skip
    """The sampling weight of every open (domain, level) cell (see the module's docstring)."""
    prior, mix = prior or {}, mix or {}
    cells = [(d, lvl) for d, lv in levels.items() for lvl in open_levels(lv, stats, d, threshold)]
    return {c: mix.get(c[0], 1.0) * max(min_weight, stats[c].informative if c in stats else prior.get(c, 1.0))
            for c in cells}  # fmt: skip


def arm_rows(weights: dict, stats: dict, counts: Counter) -> list[dict]:
    """Per open cell: what the sampler knows of it and what it chose (a Prefect table)."""
    total = sum(weights.values()) or 1.0
    return [{"domain": d, "level": lvl, "groups": stats[(d, lvl)].groups if (d, lvl) in stats else 0,
             "pass_rate": round(stats[(d, lvl)].pass_rate, 3) if (d, lvl) in stats else None,
             "informative": round(stats[(d, lvl)].informative, 3) if (d, lvl) in stats else None,
             "share": round(w / total, 4), "tasks": counts.get((d, lvl), 0)}
            for (d, lvl), w in sorted(weights.items())]  # fmt: skip


def plan(levels: dict[str, list[int]], count: int, stats: dict, threshold: float, min_weight: float,
         prior: dict | None = None, mix: dict[str, float] | None = None, seed: int | None = None) -> Counter:  # fmt: skip
    """How many fresh tasks per (domain, level), `count` in all; `levels`: each domain's
    levels to sample from; `prior`: a weight for cells not tried yet (eval_prior), else 1;
    `mix`: each domain's mixing weight (sampler.weights), multiplying its cells'.

    Each cell gets the whole part of its expected count; the tasks left over go to cells
    drawn without replacement in proportion to their fractional parts, seeded (`seed`:
    the cycle's), so that with hundreds of cells and a handful of tasks each cell is
    sampled as often as its weight says, not the first ones in order every cycle.
    Without a seed the leftovers go by largest fraction (ties in order)."""
    return allot(cell_weights(levels, stats, threshold, min_weight, prior, mix), count, seed)


def posterior(stats: dict, cell, prior: dict, strength: float, base: float) -> tuple[float, float]:
    """Beta(a, b) on the chance that a group of `cell` has reward variance: the prior
    (the starting evaluation's share for the cell, else `base`) plus its measured groups."""
    q = min(0.95, max(0.05, prior.get(cell, base)))
    a, b = strength * q, strength * (1 - q)
    if cell not in stats:
        return a, b
    informative = stats[cell].informative * stats[cell].groups
    return a + informative, b + stats[cell].groups - informative


def thompson(levels: dict[str, list[int]], count: int, stats: dict, threshold: float, strength: float,
             prior: dict | None = None, mix: dict[str, float] | None = None, seed: int = 0,
             max_share: float = 1.0) -> tuple[Counter, dict]:  # fmt: skip
    """`count` tasks over the open cells, each to the cell with the highest Beta draw
    times its mixing weight (a fresh draw per task, seeded); with each cell's posterior
    mean (the `weights` the arms table shows). No cell takes more than `max_share` of the
    tasks (at least one), so that a cycle keeps some breadth when one arm's posterior
    dominates."""
    prior, mix = prior or {}, mix or {}
    cells = [(d, lvl) for d, lv in levels.items() for lvl in open_levels(lv, stats, d, threshold)]
    groups = sum(st.groups for st in stats.values())
    base = sum(st.informative * st.groups for st in stats.values()) / groups if groups else 0.5
    beta = {c: posterior(stats, c, prior, strength, base) for c in cells}
    rng = random.Random(seed)
    out: Counter = Counter()
    cap = max(1, math.ceil(max_share * count))
    for _ in range(count):
        free = [c for c in cells if out[c] < cap] or cells
        out[max(free, key=lambda c: rng.betavariate(*beta[c]) * mix.get(c[0], 1.0))] += 1
    return out, {c: mix.get(c[0], 1.0) * a / (a + b) for c, (a, b) in beta.items()}


def allot(weights: dict[tuple[str, int], float], count: int, seed: int | None = None) -> Counter:
    """`count` tasks over cells in proportion to `weights` (see `plan`)."""
    cells = list(weights)
    total = sum(weights.values())
    exact = {c: count * w / total for c, w in weights.items()}
    out = Counter({c: int(x) for c, x in exact.items()})
    fraction = {c: exact[c] - int(exact[c]) for c in cells}
    if seed is None:
        order = sorted(cells, key=lambda c: (-fraction[c], cells.index(c)))
    else:  # weighted sampling without replacement: the largest u ** (1 / w) (Efraimidis & Spirakis)
        rng = random.Random(seed)
        keys = {c: rng.random() ** (1 / fraction[c]) if fraction[c] > 0 else -1.0 for c in cells}
        order = sorted(cells, key=lambda c: -keys[c])
    for c in order[: count - sum(out.values())]:
        out[c] += 1
    return +out
