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
  (eval.before_and_after), the share of that cell's held-out tasks it earned any reward
  on (`eval_prior`), so a first cycle does not spend its samples where the model has no
  signal at all.

Fresh tasks are then split across the weighted (domain, level) cells by largest
remainder, deterministically. Per-task choices (which failures come back) belong to the
replay policy, not here. Not done: cross-domain transfer estimates, or closing a level.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import duckdb

from storage.lake import Lake

LEVEL_STATS_SQL = """
WITH groups AS (
    SELECT domain, level, group_id, avg((verdict = 'pass')::INT) AS pass_rate,
           (max(reward) > min(reward))::INT AS informative
    FROM trajectories
    WHERE split = 'train' AND cycle > $cycle - $window AND cycle <= $cycle
    GROUP BY domain, level, group_id
)
SELECT domain, level, avg(pass_rate) AS pass_rate, avg(informative) AS informative, count(*) AS groups
FROM groups GROUP BY domain, level
"""


@dataclass
class LevelStats:
    pass_rate: float
    informative: float  # share of groups with reward variance
    groups: int


def level_stats(lake: Lake, run_id: str, cycle: int, window: int) -> dict[tuple[str, int], LevelStats]:
    """Measured (domain, level) stats over cycles (cycle - window, cycle]."""
    cycles = [c for c in lake.committed_cycles(run_id) if cycle - window < c <= cycle]
    if not cycles:
        return {}
    con = duckdb.connect()
    con.register("trajectories", lake.dataset("trajectories", run_id, cycles))
    rows = con.execute(LEVEL_STATS_SQL, {"cycle": cycle, "window": window}).fetchall()
    return {(d, lvl): LevelStats(p, i, g) for d, lvl, p, i, g in rows}


def open_levels(levels: list[int], stats: dict[tuple[str, int], LevelStats], domain: str, threshold: float) -> list[int]:
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


def eval_prior(lake: Lake, run_id: str, version: int) -> dict[tuple[str, int], float]:
    """Per (domain, level), the share of held-out tasks the policy `version` (or the
    latest evaluated one before it) earned any reward on, greedily: where that is 0 the
    samples of a group will most likely all score 0 too, so nothing is learnt there yet.
    Empty when the run has no evaluation (eval.before_and_after off)."""
    from storage import evals

    con = evals.connect(lake, run_id)
    row = con.execute("SELECT max(policy_version) FROM eval_cells WHERE mode = 'greedy' AND policy_version <= ?",
                      [version]).fetchone()  # fmt: skip
    if row[0] is None:
        return {}
    rows = con.execute("SELECT domain, level, with_reward FROM eval_cells WHERE mode = 'greedy' AND policy_version = ?",
                       [row[0]]).fetchall()  # fmt: skip
    return {(d, lvl): share for d, lvl, share in rows}


def plan(levels: dict[str, list[int]], count: int, stats: dict, threshold: float, min_weight: float,
         prior: dict | None = None) -> Counter:  # fmt: skip
    """How many fresh tasks per (domain, level), `count` in all; `levels`: each domain's
    levels to sample from; `prior`: a weight for cells not tried yet (eval_prior), else 1."""
    prior = prior or {}
    cells = [(d, lvl) for d, lv in levels.items() for lvl in open_levels(lv, stats, d, threshold)]
    weights = {c: max(min_weight, stats[c].informative if c in stats else prior.get(c, 1.0)) for c in cells}
    total = sum(weights.values())
    exact = {c: count * w / total for c, w in weights.items()}
    out = Counter({c: int(x) for c, x in exact.items()})
    by_remainder = sorted(cells, key=lambda c: (-(exact[c] - int(exact[c])), cells.index(c)))
    for c in by_remainder[: count - sum(out.values())]:
        out[c] += 1
    return +out
