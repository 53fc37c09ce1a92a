"""The curriculum's one query over the lake (tasks/curriculum.py:level_stats) at hundreds
of arms: 100 domains x 3 levels, 100 committed cycles of 64 tasks x 8 samples
(synthetic rows, storage/synthetic.py), to a local lake. Timed over the last 3 cycles
(the default window; `--windows 3,20` adds others) and over all 100; the baseline is DuckDB's own scan of the same
Parquet files with the same SQL and no lake around it (the lake adds finding committed
cycles and the dataset). "First call": nothing cached (a resumed run, a single-cycle
flow); "in a run": the older cycles of the window were read by earlier cycles' calls
(committed cycles are cached per process), only the newest is read. Then again after
`flywheel store compact`. Median of `--repeat` calls after one warm-up.

    .venv/bin/python bench/sampler_query.py        # ~1 min
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402

from flywheel.storage.compact import compact, file_count  # noqa: E402
from flywheel.storage.lake import Lake  # noqa: E402
from flywheel.storage.synthetic import cycle_tables  # noqa: E402
from flywheel.storage.query import GROUPS_VIEW  # noqa: E402
from flywheel.tasks.curriculum import ARM_CYCLES_SQL, forget_cycles, level_stats  # noqa: E402


def median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--windows", default="3", help="comma-separated curriculum.window_cycles to time, besides all cycles")
    args = ap.parse_args()
    windows = sorted({int(w) for w in args.windows.split(",")} | {args.cycles})
    names = tuple(f"rg/d{i:03d}" for i in range(args.domains))
    with tempfile.TemporaryDirectory() as tmp:
        lake = Lake(str(Path(tmp) / "lake"))
        for c in range(args.cycles):
            tasks, trajs = cycle_tables("q", c, args.tasks, args.k, task_pool=args.domains * 3 * 20, domains=names)
            lake.commit_tables("q", c, tasks, trajs)
        last = args.cycles - 1
        arms = len(level_stats(lake, "q", last, args.cycles))
        files = [str(p) for p in Path(tmp, "lake").rglob("*.parquet") if "trajectories" in str(p)]

        def raw(window):
            con = duckdb.connect()
            con.execute(f"CREATE VIEW trajectories AS SELECT * FROM read_parquet({files!r}, union_by_name=true)")
            con.execute(GROUPS_VIEW)
            return con.execute(f"SELECT * FROM ({ARM_CYCLES_SQL}) WHERE cycle > {last - window}").fetchall()

        print(f"{args.domains} domains x 3 levels ({arms} arms seen), {args.cycles} cycles x {args.tasks} tasks x {args.k}")
        for label in ("per-cycle files", "after `flywheel store compact`"):
            print(f"{label}: {file_count(lake, 'q')} files")
            for window in windows:
                cold = median_ms(lambda: (forget_cycles(), level_stats(lake, "q", last, window)), args.repeat)
                level_stats(lake, "q", last, window)
                # a run's next cycle: the window's older cycles were read by earlier cycles
                warm = median_ms(lambda: (forget_cycles(last), level_stats(lake, "q", last, window)), args.repeat)
                base = median_ms(lambda: raw(window), args.repeat)
                print(f"  window {window:>3}: level_stats, first call {cold:7.1f} ms, in a run {warm:6.1f} ms   "
                      f"duckdb over the files {base:7.1f} ms   ratio (first call) {cold / base:.2f}")  # fmt: skip
            compact(lake, "q")
            files = [str(p) for p in Path(tmp, "lake").rglob("*.parquet") if "trajectories" in str(p)]


if __name__ == "__main__":
    main()
