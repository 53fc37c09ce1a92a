"""Loading a 100k-row task file: rows per second and peak memory, against the floor.

Writes a JSONL file (and the same rows as Parquet) of `--rows` rows in the shapes users
bring (a third exact answers, a third numbers, a third MBPP-style assert lines), then,
each in a fresh process so peak memory is the load's own:
- baseline: `json.loads` of every line and nothing else (the least any loader does);
- flywheel: `FileTasks(path)`: read, recognise the shape, check and keep every row, parse
  the tests into host-compared cases (environments/sources/task_rows.py, python_tests.py);
- the same for the Parquet file.
Prints rows/s, the ratio to the baseline and the peak RSS of each, best of `--rounds`.

    .venv/bin/python bench/task_files.py [--rows 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
path, mode = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if mode == "baseline":
    n = 0
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)
            n += 1
    kept = n
else:
    from flywheel.environments.sources.task_file import FileTasks
    env = FileTasks(path)
    n, kept = env.rows + len(env.quarantined), env.rows
dt = time.perf_counter() - t0
# VmHWM, not ru_maxrss: the latter keeps the high-water mark of the parent's pages this
# process held between fork and exec
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({{"rows": n, "kept": kept, "seconds": dt, "peak_mib": hwm / 1024}}))
"""


def make_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        kind = i % 3
        if kind == 0:
            rows.append({"id": f"r{i}", "prompt": f"Name the colour number {a}. End with `Answer: <colour>`.",
                         "answer": rng.choice(["red", "green", "blue"]), "source": "bench"})  # fmt: skip
        elif kind == 1:
            rows.append({"id": f"r{i}", "prompt": f"What is {a} + {b}? End with `Answer: <number>`.", "answer": a + b,
                         "level": 1 + i % 3})  # fmt: skip
        else:
            rows.append({"task_id": i, "text": f"Write a function that adds {a} to its argument.",
                         "code": f"def add_{a}(x):\n    return x + {a}",
                         "test_list": [f"assert add_{a}({b}) == {a + b}", f"assert add_{a}(0) == {a}"]})  # fmt: skip
    return rows


def run(path: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT)), path, mode],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="flywheel-bench-") as tmp:
        rows = make_rows(args.rows)
        jsonl = Path(tmp) / "tasks.jsonl"
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
        parquet = Path(tmp) / "tasks.parquet"  # one schema: every shape's columns, nulls elsewhere, answers as text
        text = [{**r, "answer": str(r["answer"])} if "answer" in r else r for r in rows]
        columns = sorted({k for r in text for k in r})
        pq.write_table(pa.table({k: [r.get(k) for r in text] for k in columns}), parquet)
        print(f"{args.rows} rows: JSONL {jsonl.stat().st_size / 2**20:.1f} MiB, Parquet {parquet.stat().st_size / 2**20:.1f} MiB")
        del rows
        results = {}
        for label, path, mode in (("baseline json.loads (JSONL)", jsonl, "baseline"),
                                  ("flywheel FileTasks (JSONL)", jsonl, "flywheel"),
                                  ("flywheel FileTasks (Parquet)", parquet, "flywheel")):  # fmt: skip
            runs = [run(str(path), mode) for _ in range(args.rounds)]
            results[label] = min(runs, key=lambda r: r["seconds"])
        base = results["baseline json.loads (JSONL)"]["seconds"]
        print(f"{'':32} {'rows/s':>10} {'x baseline time':>16} {'peak RSS MiB':>13} {'rows kept':>10}")
        for label, r in results.items():
            print(f"{label:32} {r['rows'] / r['seconds']:>10,.0f} {r['seconds'] / base:>16.1f} {r['peak_mib']:>13.0f}"
                  f" {r['kept']:>10}")  # fmt: skip


if __name__ == "__main__":
    main()
