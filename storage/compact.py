"""Compaction: merge a run's many small per-cycle files into a few large ones.

Every cycle writes one tasks file and one trajectories file per domain, so after a few
hundred cycles a query opens thousands of small files. `compact` rewrites all committed
cycles of a run into files of up to `rows_per_file` rows (sorted by cycle, domain, task,
sample, in the current schema: old-version files come out upgraded), then commits them
the lake's usual way:

    1. write  compacted/run=<run>/cycles=<a>-<b>/<kind>/part-<i>.parquet
    2. write  _compactions/run=<run>/cycles=<a>-<b>.json         (the commit point)
    3. delete the covered cycles' own data files and any older compaction it supersedes

A reader before step 2 sees the old files; after it, the compacted ones (the lake prefers
a compaction over a cycle's own files, and the widest compaction over narrower ones), so
no query changes its result at any point, and a crash anywhere leaves at most garbage that
the next `compact` removes. Cycle commit markers are kept: they still say which cycles
exist. Not done: compacting only part of a run, or merging across runs.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.fs as pafs

from flywheel.storage.lake import SCHEMAS, Lake
from flywheel.storage.schema import SCHEMA_VERSION, with_cycle

SORT_KEYS = {
    "tasks": [("cycle", "ascending"), ("task_id", "ascending")],
    "trajectories": [("cycle", "ascending"), ("domain", "ascending"), ("task_id", "ascending"),
                     ("sample_index", "ascending")],
}  # fmt: skip


def compact(lake: Lake, run_id: str, rows_per_file: int = 1_000_000) -> dict:
    """Merge every committed cycle of `run_id`; returns what was done (files before/after)."""
    cycles = lake.committed_cycles(run_id)
    if not cycles:
        return {"cycles": 0, "files_before": 0, "files_after": 0}
    old = lake.compactions(run_id)
    if len(old) == 1 and old[0]["cycles"] == cycles:
        _remove_superseded(lake, run_id, old[0])
        return {"cycles": len(cycles), "files_before": len(old[0]["files"]), "files_after": len(old[0]["files"])}
    name = f"cycles={cycles[0]}-{cycles[-1]}"
    out_dir = lake._path("compacted", f"run={run_id}", name)
    lake._delete_dir(out_dir)  # a crashed earlier attempt at the same range
    files_before = file_count(lake, run_id)
    written = []
    for kind in SCHEMAS:
        if kind == "tasks":  # v1 task files have no cycle column: take it from the marker
            table = pa.concat_tables(with_cycle(lake.dataset(kind, run_id, [c]).to_table(), c) for c in cycles)
        else:
            table = lake.dataset(kind, run_id, cycles).to_table()
        table = table.sort_by(SORT_KEYS[kind])
        for i, start in enumerate(range(0, max(table.num_rows, 1), rows_per_file)):
            path = f"{out_dir}/{kind}/part-{i}.parquet"
            lake._write_table(path, table.slice(start, rows_per_file))
            written.append(path[len(lake.root) + 1 :])
    marker = {
        "run_id": run_id,
        "cycles": cycles,
        "schema_version": SCHEMA_VERSION,
        "compacted_at": datetime.now(timezone.utc).isoformat(),
        "files": written,
    }
    lake._write_bytes(lake._path("_compactions", f"run={run_id}", f"{name}.json"), json.dumps(marker).encode())
    _remove_superseded(lake, run_id, marker)
    return {"cycles": len(cycles), "files_before": files_before, "files_after": len(written)}


def _remove_superseded(lake: Lake, run_id: str, keep: dict) -> None:
    """Delete the data the compaction `keep` replaced: cycles' own files, older compactions."""
    for cycle in keep["cycles"]:
        for kind in SCHEMAS:
            lake._delete_dir(lake._cycle_dir(kind, run_id, cycle))
    selector = pafs.FileSelector(lake._path("_compactions", f"run={run_id}"), allow_not_found=True)
    keep_name = f"cycles={keep['cycles'][0]}-{keep['cycles'][-1]}"
    for info in lake.fs.get_file_info(selector):
        name = info.base_name.removesuffix(".json")
        if name != keep_name and info.base_name.endswith(".json"):
            lake.fs.delete_file(info.path)  # the marker first: then its files are garbage
            lake._delete_dir(lake._path("compacted", f"run={run_id}", name))


def file_count(lake: Lake, run_id: str) -> int:
    """Files a full read of the run opens (for reports and tests)."""
    return sum(len(lake._committed_files(kind, run_id, None)[0]) for kind in SCHEMAS)
