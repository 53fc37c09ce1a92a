"""Share of zero-variance groups per cycle, for sampler arms run at equal compute
(issue 18): each run's groups from its lake's `groups` view (storage/query.py), the
share over cycles 0..N-1 with a 95% Wilson interval, and each arm's difference from the
first (the baseline) with a bootstrap interval over groups.

    .venv/bin/python bench/zero_variance.py --cycles 13 rg-uniform-sft1 rg-curriculum-sft1 rg-thompson-sft1

Groups of one run are treated as independent samples; they share the policy of their
cycle, so the interval is somewhat narrower than one over independent runs would be.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flywheel.stats import unpaired, wilson
from storage.lake import Lake
from storage.query import connect

SQL = "SELECT cycle, informative FROM groups WHERE split = 'train' AND cycle < ? ORDER BY cycle"


def groups(run_id: str, runs_dir: str, cycles: int) -> list[tuple[int, int]]:
    lake = Lake(str(Path(runs_dir).absolute() / run_id / "lake"))
    return connect(lake, run_id).execute(SQL, [cycles]).fetchall()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run ids; the first is the baseline")
    ap.add_argument("--cycles", type=int, required=True, help="compare cycles 0 .. N-1 of every run")
    ap.add_argument("--runs-dir", default="runs")
    args = ap.parse_args()
    flat = {r: [(c, 1 - i) for c, i in groups(r, args.runs_dir, args.cycles)] for r in args.runs}
    print("| cycle | " + " | ".join(args.runs) + " |")
    print("|---|" + "---|" * len(args.runs))
    for cycle in range(args.cycles):
        cells = [f"{sum(z for c, z in flat[r] if c == cycle)} of {sum(1 for c, _ in flat[r] if c == cycle)}"
                 for r in args.runs]  # fmt: skip
        print(f"| {cycle} | " + " | ".join(cells) + " |")
    print("\n| run | zero-variance groups | share [95% Wilson] | against the first (points, bootstrap 95%) |")
    print("|---|---|---|---|")
    base = [z for _, z in flat[args.runs[0]]]
    for r in args.runs:
        zs = [z for _, z in flat[r]]
        lo, hi = wilson(sum(zs), len(zs))
        vs = (
            ""
            if r == args.runs[0]
            else unpaired(base, zs).describe().replace("paired tasks", "groups a side")
        )
        print(f"| {r} | {sum(zs)} of {len(zs)} | {sum(zs) / len(zs):.3f} [{lo:.3f}, {hi:.3f}] | {vs} |")


if __name__ == "__main__":
    main()
