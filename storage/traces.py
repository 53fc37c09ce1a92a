"""Production traces in the lake: written exactly once, in batches with commit markers.

Layout under the lake root (local or S3, beside the runs' data):

    traces/workload=<w>/batch=<b>/part-0.parquet   a batch's new traces of workload <w>
    _traces/batch=<b>.json                         the batch's marker: files, counts; written last
    _quarantine/traces/batch=<b>.jsonl             records set aside: file, line, reason (scrubbed)

A batch is one ingest of one file; its id is the hash of the file's bytes and of the scrub
patterns, so ingesting the same file again finds its marker and adds nothing. A trace's id
is the hash of its scrubbed content (storage/schema.py, TRACE_SCHEMA): a batch holds only
ids no committed batch holds, so the same record in two files, or twice in one, is stored
once. As with cycles, a batch exists for readers only once its marker is written; an
ingest killed mid-batch leaves files nobody reads, and the re-run replaces them.

Not done: two ingests of *different* files that race may both add a trace they share
(each checks the committed ids before the other commits). Run one ingest at a time per
lake (the Prefect deployment's concurrency limit of 1 does), or dedupe on read by trace_id.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from flywheel.storage.lake import Lake
from flywheel.storage.schema import SCHEMA_VERSION, TRACE_SCHEMA


class TraceStore:
    def __init__(self, lake: Lake):
        self.lake = lake

    def _marker(self, batch: str) -> str:
        return self.lake._path("_traces", f"batch={batch}.json")

    def markers(self) -> list[dict]:
        selector = pafs.FileSelector(self.lake._path("_traces"), allow_not_found=True)
        infos = [i for i in self.lake.fs.get_file_info(selector) if i.base_name.endswith(".json")]
        return [self.lake._read_json(i.path) for i in sorted(infos, key=lambda i: i.path)]

    def has_batch(self, batch: str) -> bool:
        return self.lake.fs.get_file_info(self._marker(batch)).type == pafs.FileType.File

    def dataset(self, workload: str | None = None) -> ds.Dataset:
        """The committed traces (of one workload), through the current schema."""
        files = [self.lake._path(f) for m in self.markers() for f in m["files"]
                 if workload is None or f.split("/")[1] == f"workload={quote(workload, safe='')}"]  # fmt: skip
        return ds.dataset(files, schema=TRACE_SCHEMA, format="parquet", filesystem=self.lake.fs)

    def traces(self, workload: str | None = None) -> pa.Table:
        return self.dataset(workload).to_table()

    def known_ids(self) -> set[str]:
        return set(self.dataset().to_table(columns=["trace_id"]).column("trace_id").to_pylist())

    def workloads(self) -> list[str]:
        return sorted({w for m in self.markers() for w in m.get("workloads", {})})

    def commit_batch(self, batch: str, table: pa.Table, quarantined: list[dict], report: dict) -> dict:
        """Write a batch's traces (already free of known ids), its quarantine, then its marker."""
        selector = pafs.FileSelector(self.lake._path("traces"), allow_not_found=True)
        for info in self.lake.fs.get_file_info(selector):  # what a killed attempt at this batch left
            self.lake._delete_dir(f"{info.path}/batch={batch}")
        files, workloads = [], {}
        column = table.column("workload_id")
        for workload in sorted(pc.unique(column).to_pylist()):
            part = table.filter(pc.equal(column, workload))
            path = self.lake._path("traces", f"workload={quote(workload, safe='')}", f"batch={batch}", "part-0.parquet")
            self.lake._write_table(path, part)
            files.append(path[len(self.lake.root) + 1 :])
            workloads[workload] = part.num_rows
        if quarantined:
            text = "".join(json.dumps(q, default=str) + "\n" for q in quarantined)
            self.lake._write_bytes(self.lake._path("_quarantine", "traces", f"batch={batch}.jsonl"), text.encode())
        marker = {
            "batch": batch,
            "schema_version": SCHEMA_VERSION,
            "committed_at": datetime.now(timezone.utc).isoformat(),
            "files": files,
            "workloads": workloads,
            "report": report,
        }
        self.lake._write_bytes(self._marker(batch), json.dumps(marker).encode())
        return marker

    def quarantine(self, batch: str) -> list[dict]:
        path = self.lake._path("_quarantine", "traces", f"batch={batch}.jsonl")
        if self.lake.fs.get_file_info(path).type != pafs.FileType.File:
            return []
        with self.lake.fs.open_input_stream(path) as f:
            return [json.loads(line) for line in f.read().decode().splitlines() if line]
