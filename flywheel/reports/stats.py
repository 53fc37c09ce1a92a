"""Intervals for every number an evaluation reports, and the paired comparison of two policies.

- `wilson(k, n)`: the Wilson score interval of a pass rate k/n (95%), which stays inside
  [0, 1] and is honest at 0/n and n/n, where the normal approximation says +/- 0.
- `paired(a, b)`: two policies scored on the *same* tasks (dicts task_id -> 0/1 or a
  reward); the mean difference b - a with a percentile bootstrap interval over tasks
  (resampling tasks keeps the pairing, so task difficulty cancels), and whether it is
  resolvable: an interval that spans 0 is reported as "no resolvable difference".
  Cells (domain, level) are resampled within themselves when given, so the mix of cells
  stays that of the evaluation. The bootstrap collapses where every pair differs alike
  (14 tasks all failed before and all passed after: "+100 to +100"); for pass/fail scores
  the interval is therefore widened to hold Newcombe's hybrid score interval for paired
  proportions too (Wilson-based, so honest at 0/n and n/n: +69.6 to +100 there).
- `seeds_paired(a_runs, b_runs)`: two training recipes, each run at several seeds and
  evaluated on the same tasks (an ablation): the difference of their means, resampling
  both the runs of each side and the tasks, so the interval holds seed-to-seed training
  noise as well as which tasks were drawn.
Deterministic: the bootstrap draws from a seeded generator.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

Z95 = 1.959963984540054


def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of the 95% Wilson interval for k successes in n trials."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return (0.0 if k <= 0 else low, 1.0 if k >= n else high)  # exact at the ends, not 1 - 1e-16


@dataclass(frozen=True)
class Paired:
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean of b - a
    low: float
    high: float

    @property
    def resolvable(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> dict:
        return {"n": self.n, "a": round(self.mean_a, 4), "b": round(self.mean_b, 4), "diff": round(self.diff, 4),
                "ci_low": round(self.low, 4), "ci_high": round(self.high, 4), "resolvable": self.resolvable}  # fmt: skip

    def describe(self, unit: float = 100.0, label: str = "points") -> str:
        d, lo, hi = self.diff * unit, self.low * unit, self.high * unit
        verdict = "" if self.resolvable else "; no resolvable difference"
        return f"{d:+.1f} {label} (95% CI {lo:+.1f} to {hi:+.1f}, n={self.n} paired tasks{verdict})"


MIN_STRATUM = 5


def paired(a: dict, b: dict, cells: dict | None = None, rounds: int = 10_000, seed: int = 0) -> Paired:
    """b - a over the tasks both scored. `cells`: task_id -> cell, resampled within; cells
    of fewer than MIN_STRATUM tasks are pooled (resampling a cell of one task within itself
    gives it no variance at all, and the interval would shrink to a point)."""
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError("the two evaluations share no task: compare policies on the same tasks")
    diffs = {i: float(b[i]) - float(a[i]) for i in ids}
    sizes: dict = {}
    for i in ids:
        sizes[cells.get(i) if cells else None] = sizes.get(cells.get(i) if cells else None, 0) + 1
    groups: dict = {}
    for i in ids:
        cell = cells.get(i) if cells else None
        groups.setdefault(cell if sizes[cell] >= MIN_STRATUM else "pooled", []).append(diffs[i])
    rng = random.Random(seed)
    means = []
    for _ in range(rounds):
        total = 0.0
        for values in groups.values():
            total += sum(values[rng.randrange(len(values))] for _ in values)
        means.append(total / len(ids))
    means.sort()
    lo, hi = means[int(0.025 * rounds)], means[min(rounds - 1, int(0.975 * rounds))]
    mean = sum(diffs.values()) / len(ids)
    if all(float(v[i]) in (0.0, 1.0) for v in (a, b) for i in ids):
        n_lo, n_hi = newcombe_paired([float(a[i]) for i in ids], [float(b[i]) for i in ids])
        lo, hi = min(lo, n_lo), max(hi, n_hi)
    return Paired(len(ids), sum(float(a[i]) for i in ids) / len(ids), sum(float(b[i]) for i in ids) / len(ids),
                  mean, lo, hi)  # fmt: skip


def newcombe_paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """95% interval of mean(b) - mean(a) for paired pass/fail scores: Newcombe's (1998)
    method 10, from the two Wilson intervals and the pairs' phi correlation."""
    n = len(a)
    both = sum(1 for x, y in zip(a, b) if x and y)
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    neither = n - both - only_a - only_b
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    (l1, u1), (l2, u2) = wilson(both + only_a, n), wilson(both + only_b, n)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    d = p2 - p1
    low = d - math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    high = d + math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return max(-1.0, low), min(1.0, high)


def unpaired(a: list[float], b: list[float], rounds: int = 10_000, seed: int = 0) -> Paired:
    """mean(b) - mean(a) for independent samples (e.g. runs of different seeds), with a
    percentile bootstrap interval resampling each side on its own."""
    if not a or not b:
        raise ValueError("both sides need at least one value")
    rng = random.Random(seed)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    means = sorted(
        sum(b[rng.randrange(len(b))] for _ in b) / len(b) - sum(a[rng.randrange(len(a))] for _ in a) / len(a)
        for _ in range(rounds)
    )
    return Paired(min(len(a), len(b)), ma, mb, mb - ma, means[int(0.025 * rounds)],
                  means[min(rounds - 1, int(0.975 * rounds))])  # fmt: skip


def seeds_paired(a_runs: list[dict], b_runs: list[dict], rounds: int = 10_000, seed: int = 0) -> Paired:
    """mean(b runs) - mean(a runs) over the tasks every run scored (dicts task_id -> score).
    Each bootstrap round draws the runs of each side with replacement and the tasks with
    replacement (the same tasks for both sides, so difficulty still cancels). With one run
    a side it is `paired`; the fewer the seeds, the more an unlucky seed can swing it:
    three a side is the least that shows the spread at all."""
    if not a_runs or not b_runs:
        raise ValueError("both sides need at least one run")
    ids = sorted(set.intersection(*(set(r) for r in a_runs + b_runs)))
    if not ids:
        raise ValueError("the runs share no evaluated task: evaluate them on the same tasks")
    a = [[float(r[i]) for i in ids] for r in a_runs]
    b = [[float(r[i]) for i in ids] for r in b_runs]
    rng = random.Random(seed)
    means = []
    for _ in range(rounds):
        ra = [a[rng.randrange(len(a))] for _ in a]
        rb = [b[rng.randrange(len(b))] for _ in b]
        tasks = [rng.randrange(len(ids)) for _ in ids]
        gaps = [sum(r[t] for r in rb) / len(rb) - sum(r[t] for r in ra) / len(ra) for t in tasks]
        means.append(sum(gaps) / len(ids))
    means.sort()
    mean_a = sum(map(sum, a)) / (len(a) * len(ids))
    mean_b = sum(map(sum, b)) / (len(b) * len(ids))
    return Paired(len(ids), mean_a, mean_b, mean_b - mean_a, means[int(0.025 * rounds)],
                  means[min(rounds - 1, int(0.975 * rounds))])  # fmt: skip


def interval_text(k: float, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n if n else 0:.3f} [{lo:.3f}, {hi:.3f}]"
