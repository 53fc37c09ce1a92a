"""Ingest: production logs -> the lake's `traces/`, scrubbed, deduplicated, exactly once.

For each file (JSONL, JSONL.gz, Parquet or a `datasets` dir; shapes in
flywheel/production/logs.py): every record is scrubbed (flywheel/production/scrub.py), checked, and
either becomes a trace or is quarantined with its file, line and reason; traces whose
content id the lake already holds, or that came earlier in the same file, are counted as
duplicates and dropped; the rest are committed as one batch (storage/traces.py). The
report counts all of it per file: records, new, duplicates, quarantined (by reason),
redactions (by pattern) and traces per workload.

`ingest_file` is the body (bench/ingest.py times it); the `ingest` flow runs it over
paths and publishes each report as a table artifact; the `ingest-traces` deployment in
prefect.yaml runs the flow on a schedule. What a trace becomes, a task with a verifier,
is the workload's business (flywheel/config/__init__.py `workloads`, environments/sources/traces.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import logging

from prefect import flow, get_run_logger
from prefect.exceptions import MissingContextError

from flywheel.environments.sources.task_rows import read_rows
from flywheel.config import FlywheelConfig, IngestConfig
from flywheel.production.logs import RecordError, parse_record
from flywheel.reports.progress import stage
from flywheel.reports.summary import publish_table
from flywheel.production.scrub import Scrubber
from flywheel.storage.lake import Lake
from flywheel.storage.schema import TRACE_SCHEMA, stable_id
from flywheel.storage.traces import TraceStore

PREVIEW_CHARS = 500


@dataclass
class IngestReport:
    file: str
    batch: str
    records: int = 0
    new: int = 0
    duplicates: int = 0  # already in the lake, or earlier in this file
    quarantined: int = 0
    already_ingested: bool = False  # this very file was ingested before: nothing read
    seconds: float = 0.0
    reasons: dict = field(default_factory=dict)
    redactions: dict = field(default_factory=dict)
    workloads: dict = field(default_factory=dict)

    def row(self) -> dict:
        """One line for a table (CLI, Prefect artifact)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("reasons", "redactions", "workloads")}
        out["seconds"] = round(self.seconds, 2)
        out["redactions"] = ", ".join(f"{k} {v}" for k, v in sorted(self.redactions.items())) or "-"
        out["workloads"] = ", ".join(f"{k} {v}" for k, v in sorted(self.workloads.items())) or "-"
        return out


def _reason_kind(error: str) -> str:
    """A reason without its particulars, for counting: "message N: unknown role '...'"."""
    return re.sub(r"(?<![\w-])\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", error)).split(";")[0][:70]


def count_records(path: str) -> int:
    """Records in a file, for the progress bar (lines of a plain JSONL, rows of Parquet)."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(p).metadata.num_rows
        except (
            pa.ArrowException,
            OSError,
        ):  # not Parquet: read_rows reports it as the file's one quarantined entry
            return 0
    if p.is_file() and not p.name.endswith(".gz"):
        with open(p, "rb") as f:
            return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
    return 0


def file_digest(path: str) -> str:
    """sha256 of a file's bytes (of every file under a dir, in name order)."""
    h = hashlib.sha256()
    p = Path(path)
    for f in sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def ingest_file(store: TraceStore, path: str, cfg: IngestConfig, workload: str | None = None,
                advance=lambda n: None, known: set[str] | None = None) -> IngestReport:  # fmt: skip
    """One file into the lake as one batch (nothing, when that file was ingested before).
    `known`: the trace ids the lake holds, when the caller has them (read here otherwise);
    the new ones are added to it, so a flow over many files reads the lake's ids once."""
    t0 = time.monotonic()
    default = workload or cfg.default_workload
    scrubber = Scrubber(cfg.scrub_patterns, cfg.scrub_defaults)
    batch = stable_id(
        "traces", file_digest(path), default, sorted(scrubber.patterns.items()), cfg.max_message_chars
    )
    report = IngestReport(file=path, batch=batch)
    if store.has_batch(batch):
        report.already_ingested, report.seconds = True, time.monotonic() - t0
        return report
    known = store.known_ids() if known is None else known
    now = datetime.now(timezone.utc)
    rows, quarantined, seen = [], [], set()
    reasons: Counter[str] = Counter()
    redactions: Counter[str] = Counter()
    workloads: Counter[str] = Counter()
    name = Path(path).name
    for where, raw, error in read_rows(path):
        report.records += 1
        if report.records % 1000 == 0:
            advance(1000)
        if not error:
            try:
                trace = parse_record(raw, scrubber, redactions, default, cfg.max_message_chars)
            except RecordError as exc:
                error = str(exc)
        if error:
            reasons[_reason_kind(error)] += 1
            # the scrubbed record as JSON text (never a Python repr), cut at PREVIEW_CHARS
            scrubbed = scrubber.scrub_value(raw, Counter()) if raw is not None else None
            preview = json.dumps(scrubbed, ensure_ascii=False, default=str) if raw is not None else ""
            quarantined.append({"file": path, "where": where, "reason": error,
                                "record": preview[:PREVIEW_CHARS],
                                "record_cut": len(preview) > PREVIEW_CHARS})  # fmt: skip
            continue
        if trace["trace_id"] in known or trace["trace_id"] in seen:
            report.duplicates += 1
            continue
        seen.add(trace["trace_id"])
        workloads[trace["workload_id"]] += 1
        rows.append({**trace, "source": f"{name}:{where}", "batch": batch, "ingested_at": now})
    advance(report.records % 1000)
    report.new, report.quarantined = len(rows), len(quarantined)
    report.reasons, report.redactions, report.workloads = dict(reasons), dict(redactions), dict(workloads)
    table = pa.Table.from_pylist(rows, schema=TRACE_SCHEMA)
    report.seconds = time.monotonic() - t0
    store.commit_batch(batch, table, quarantined, report.row())
    known.update(seen)
    report.seconds = time.monotonic() - t0
    return report


LOG_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".ndjson", ".parquet")


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given; a dir (a drop dir of logs) as its log files in name order, unless it
    is a `datasets` dir (saved with save_to_disk), which is read as one."""
    out = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"ingest: {path} does not exist")
        if p.is_dir() and not any(
            (p / f).exists() for f in ("dataset_info.json", "dataset_dict.json", "state.json")
        ):
            out += [str(f) for f in sorted(p.iterdir()) if f.is_file() and f.name.endswith(LOG_SUFFIXES)]
        else:
            out.append(path)
    return out


def _logger():
    """The flow run's logger; the library's own when the body runs without Prefect
    (`ingest.fn`, as `flywheel ingest` does when no Prefect server is configured)."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("flywheel")


@flow(name="ingest")
def ingest(paths: list[str], config: FlywheelConfig = FlywheelConfig(), workload: str | None = None,
           store: str | None = None) -> list[IngestReport]:  # fmt: skip
    """Production logs into the lake (`store`, else `config.store.uri`), one batch per file."""
    uri = store or config.store.uri
    if not uri:
        raise ValueError("ingest needs a lake: give `store` (a dir or s3://bucket/prefix) or set store.uri")
    traces = TraceStore(Lake(uri, config.store.endpoint, config.store.region))
    log = _logger()
    paths, reports = expand_paths(paths), []
    known = traces.known_ids()  # once: each file's new ids are added as it commits
    for path in paths:
        with stage("ingest", count_records(path)) as advance:
            report = ingest_file(traces, path, config.ingest, workload, advance, known)
        log.info("%s: %s", path, report.row())
        reports.append(report)
    publish_table("ingest", "report", [r.row() for r in reports], "traces ingested, per file")
    return reports
