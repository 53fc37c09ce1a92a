"""Ingesting 100k production records: records per second into a local lake and into a real
S3 server (SeaweedFS), against the floor.

Writes a JSONL file of `--records` Data Flywheel Blueprint records (extraction requests with
an email and a phone number to scrub, feedback on a share, 2% malformed, 5% repeats), then
times, side by side in this script, best of `--rounds`:
- baseline: `json.loads` of every line and nothing else (the least any ingest does);
- local: `ingest_file` into a fresh local lake (parse, scrub, check, dedupe, write, commit);
- s3: the same into a fresh prefix of a SeaweedFS server on loopback.
Prints records/s and the ratio to the baseline.

    .venv/bin/python bench/ingest.py [--records 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flywheel.flows.ingest import ingest_file  # noqa: E402
from flywheel.config import IngestConfig  # noqa: E402
from flywheel.storage.lake import Lake  # noqa: E402
from flywheel.storage.traces import TraceStore  # noqa: E402


def write_log(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            if rng.random() < 0.02:
                f.write('{"request": {"messages": [{"role": "robot"}]}}\n' if i % 2 else "not json\n")
                continue
            j = i if rng.random() > 0.05 else rng.randrange(max(1, i))  # a repeat of an earlier record
            total, vendor = 100 + j % 9000, ["Acme", "Globex", "Initech"][j % 3]
            f.write(json.dumps({
                "timestamp": 1764633600 + j, "workload_id": f"w{j % 4}", "client_id": f"c{j % 50}",
                "request": {"model": "prod", "temperature": 0.2, "messages": [
                    {"role": "system", "content": "Extract the total and vendor as JSON."},
                    {"role": "user", "content": f"Invoice {j} from {vendor} Ltd, due {total} EUR. Questions to "
                                                f"ap{j}@{vendor.lower()}.com or +1 415-555-{j % 10000:04d}."}]},
                "response": {"choices": [{"message": {"role": "assistant",
                                                      "content": json.dumps({"total": total, "vendor": vendor})}}]},
                "feedback": {"rating": "up" if j % 5 else "down"},
            }) + "\n")  # fmt: skip


def baseline(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        for line in f:
            try:
                json.loads(line)
            except ValueError:
                pass
    return time.perf_counter() - t0


def timed_ingest(lake: Lake, path: Path) -> tuple[float, object]:
    t0 = time.perf_counter()
    report = ingest_file(TraceStore(lake), str(path), IngestConfig())
    return time.perf_counter() - t0, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from flywheel.storage.seaweed import SeaweedServer

    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    log = tmp / "prod.jsonl"
    write_log(log, args.records)
    size = os.path.getsize(log) / 2**20
    server = SeaweedServer(tmp / "seaweed", access_key="bench", secret_key="bench-secret")
    os.environ.update(server.env)
    server.start(bucket="bench")
    best: dict[str, float] = {}
    report = None
    try:
        for r in range(args.rounds):
            best["baseline"] = min(best.get("baseline", 1e9), baseline(log))
            seconds, report = timed_ingest(Lake(str(tmp / f"lake-{r}")), log)
            best["local"] = min(best.get("local", 1e9), seconds)
            seconds, _ = timed_ingest(Lake(f"s3://bench/lake-{r}", endpoint=server.endpoint), log)
            best["s3"] = min(best.get("s3", 1e9), seconds)
    finally:
        server.stop()
    print(f"{args.records} records, {size:.1f} MiB JSONL: {report.new} new, {report.duplicates} duplicates, "
          f"{report.quarantined} quarantined, redactions {report.redactions}")  # fmt: skip
    for name, seconds in best.items():
        print(f"{name:>9}: {args.records / seconds:>9,.0f} records/s  ({seconds:.2f} s; "
              f"{best['baseline'] / seconds:.3f}x the json.loads baseline)")  # fmt: skip


if __name__ == "__main__":
    main()
