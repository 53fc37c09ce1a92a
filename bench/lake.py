"""Lake throughput and replay latency, against plain pyarrow, in one run.

Writes: synthetic trajectories (storage/synthetic.py: 4 samples per task, a few dozen
tokens each) committed cycle by cycle through `Lake.commit_tables` (Parquet + zstd +
commit marker), to a local dir and to a SeaweedFS S3 server started here; the baseline is
`pyarrow.parquet.write_table` of the same tables to the same place with no lake around it.

Replay: the replay query (storage/query.py's SQL on DuckDB over the pyarrow dataset) over
runs of 10k, 100k and 1M trajectories, scanning every cycle (lookback = all cycles), on
the per-cycle files and after compaction; plus `select_replay` end to end as the
flywheel calls it (lookback 3, TaskSpecs loaded). Median of 5.

    .venv/bin/python bench/lake.py [--rows-per-cycle 10000] [--dir /tmp/lake-bench]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duckdb  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from flywheel.storage.compact import compact  # noqa: E402
from flywheel.storage.lake import Lake  # noqa: E402
from flywheel.storage.query import PRIORITIES, REPLAY_SQL, select_replay  # noqa: E402
from flywheel.storage.seaweed import SeaweedServer  # noqa: E402
from flywheel.storage.synthetic import cycle_tables  # noqa: E402

K = 4


def tables(run: str, cycles: int, rows_per_cycle: int, pool: int) -> list:
    return [cycle_tables(run, c, rows_per_cycle // K, K, task_pool=pool) for c in range(cycles)]


def write_rate(lake: Lake, run: str, data: list) -> float:
    t0 = time.perf_counter()
    for c, (tasks, trajs) in enumerate(data):
        lake.commit_tables(run, c, tasks, trajs)
    return sum(t.num_rows for _, t in data) / (time.perf_counter() - t0)


def raw_write_rate(lake: Lake, prefix: str, data: list) -> float:
    """The same bytes through plain pyarrow: one Parquet file per cycle, no markers."""
    t0 = time.perf_counter()
    for c, (tasks, trajs) in enumerate(data):
        lake.fs.create_dir(f"{prefix}/c{c}", recursive=True)
        pq.write_table(trajs, f"{prefix}/c{c}/t.parquet", filesystem=lake.fs, compression="zstd")
        pq.write_table(tasks, f"{prefix}/c{c}/k.parquet", filesystem=lake.fs, compression="zstd")
    return sum(t.num_rows for _, t in data) / (time.perf_counter() - t0)


def median_s(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def replay_sql_s(lake: Lake, run: str, cycles: int) -> float:
    def query():
        con = duckdb.connect()
        con.register("trajectories", lake.dataset("trajectories", run))
        sql = REPLAY_SQL.format(order=PRIORITIES["recent"])
        return con.execute(sql, {"cycle": cycles - 1, "lookback": cycles, "threshold": 1.0}).fetchall()

    assert query(), "the replay query found no failures: the bench measured nothing"
    return median_s(query)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows-per-cycle", type=int, default=10_000)
    ap.add_argument("--write-cycles", type=int, default=10, help="cycles written for the throughput figures")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="lake-bench-"))
    shutil.rmtree(work, ignore_errors=True)
    rpc = args.rows_per_cycle
    print(f"bench/lake.py: {rpc} trajectories per cycle, {os.cpu_count()} CPUs, in {work}")

    data = tables("w", args.write_cycles, rpc, pool=rpc)
    rows = []
    local = Lake(str(work / "local"))
    base = raw_write_rate(local, str(work / "raw"), data)
    ours = write_rate(local, "w", data)
    rows.append(("write, local dir (rows/s)", base, ours))
    server = SeaweedServer(work / "s3")
    os.environ.update(server.env)
    server.start(bucket="bench")
    try:
        s3 = Lake("s3://bench/lake", server.endpoint)
        base = raw_write_rate(s3, "bench/raw", data)
        ours = write_rate(s3, "w", data)
        rows.append(("write, SeaweedFS S3 (rows/s)", base, ours))
    finally:
        server.stop()
    del data

    print(f"{'':34} {'plain pyarrow':>15} {'lake':>15} {'lake/plain':>10}")
    for name, b, o in rows:
        print(f"{name:34} {b:>15,.0f} {o:>15,.0f} {o / b:>9.2f}x")

    print(f"\n{'replay query (s, median of 5)':34} {'per-cycle files':>15} {'compacted':>15} {'speed-up':>10}")
    for total in (10_000, 100_000, 1_000_000):
        cycles = max(1, total // rpc)
        run = f"r{total}"
        lake = Lake(str(work / "replay"))
        for c, (tasks, trajs) in enumerate(tables(run, cycles, rpc, pool=rpc * 2 // K)):
            lake.commit_tables(run, c, tasks, trajs)
        n = lake.dataset("trajectories", run).count_rows()
        before = replay_sql_s(lake, run, cycles)
        end_to_end = median_s(lambda: select_replay(lake, run, cycles - 1, 1.0, 3, 3), repeat=3)
        compact(lake, run)
        after = replay_sql_s(lake, run, cycles)
        print(f"{f'{n:,} rows, {cycles} cycles':34} {before:>15.3f} {after:>15.3f} {before / after:>9.2f}x"
              f"   select_replay (lookback 3): {end_to_end:.3f} s")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
