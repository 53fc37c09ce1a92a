"""Share of zero-variance groups per cycle, for sampler arms run at equal compute
(issue 18): each run's groups from its lake's `groups` view (storage/query.py), the
share over cycles 0..N-1 with a 95% Wilson interval, and each arm's difference from the
first (the baseline) with a bootstrap interval over groups; and each arm's breadth: how
many (domain, level) arms a cycle drew (mean and fewest), and how many over the run, since
a sampler can lower the share by settling on a few arms.

    .venv/bin/python bench/zero_variance.py --cycles 13 rg-uniform-sft1 rg-curriculum-sft1 rg-thompson-sft1

Groups of one run are treated as independent samples; they share the policy of their
cycle, so the interval is somewhat narrower than one over independent runs would be.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from flywheel.reports.stats import unpaired, wilson
from flywheel.storage.lake import Lake
from flywheel.storage.query import connect

SQL = "SELECT cycle, informative, domain, level FROM groups WHERE split = 'train' AND cycle < ? ORDER BY cycle"


def groups(run_id: str, runs_dir: str, cycles: int) -> list[tuple[int, int, str, int]]:
    lake = Lake(str(Path(runs_dir).absolute() / run_id / "lake"))
    return connect(lake, run_id).execute(SQL, [cycles]).fetchall()


def ratio(a: list[int], b: list[int], rounds: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """share(b) / share(a) with a percentile bootstrap interval, each side resampled on its
    own: the issue's target is a ratio ("half of uniform's share or less")."""
    rng = random.Random(seed)
    draws = []
    for _ in range(rounds):
        sa = sum(a[rng.randrange(len(a))] for _ in a)
        draws.append(sum(b[rng.randrange(len(b))] for _ in b) / len(b) / (sa / len(a)) if sa else float("inf"))
    draws.sort()
    return sum(b) / len(b) / (sum(a) / len(a)), draws[int(0.025 * rounds)], draws[int(0.975 * rounds)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run ids; the first is the baseline")
    ap.add_argument("--cycles", type=int, required=True, help="compare cycles 0 .. N-1 of every run")
    ap.add_argument("--runs-dir", default="runs")
    args = ap.parse_args()
    rows = {r: groups(r, args.runs_dir, args.cycles) for r in args.runs}
    flat = {r: [(c, 1 - i) for c, i, _, _ in rows[r]] for r in args.runs}
    arms = {r: {c: {(d, lv) for cc, _, d, lv in rows[r] if cc == c} for c in range(args.cycles)} for r in args.runs}
    print("| cycle | " + " | ".join(args.runs) + " |")
    print("|---|" + "---|" * len(args.runs))
    for cycle in range(args.cycles):
        cells = [f"{sum(z for c, z in flat[r] if c == cycle)} of {sum(1 for c, _ in flat[r] if c == cycle)}"
                 f" ({len(arms[r][cycle])} arms)" for r in args.runs]  # fmt: skip
        print(f"| {cycle} | " + " | ".join(cells) + " |")
    print("\n| run | zero-variance groups | share [95% Wilson] | against the first (points, bootstrap 95%) "
          "| share / the first's [95%] | arms a cycle: mean (fewest) | arms over the run |")
    print("|---|---|---|---|---|---|---|")
    base = [z for _, z in flat[args.runs[0]]]
    for r in args.runs:
        zs = [z for _, z in flat[r]]
        lo, hi = wilson(sum(zs), len(zs))
        vs, share = "", ""
        if r != args.runs[0]:
            vs = unpaired(base, zs).describe().replace("paired tasks", "groups a side")
            share = "{:.2f} [{:.2f}, {:.2f}]".format(*ratio(base, zs))
        per_cycle = [len(a) for a in arms[r].values() if a]
        breadth = f"{sum(per_cycle) / len(per_cycle):.1f} ({min(per_cycle)})"
        distinct = len(set().union(*arms[r].values()))
        print(f"| {r} | {sum(zs)} of {len(zs)} | {sum(zs) / len(zs):.3f} [{lo:.3f}, {hi:.3f}] | {vs} "
              f"| {share} | {breadth} | {distinct} |")


if __name__ == "__main__":
    main()
