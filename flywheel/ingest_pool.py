"""A log file's records parsed and scrubbed, in one process or, for a large file, in a few.

Scrubbing is what an ingest spends its time on (~5 MB/s of records in one process, bench/scrub.py),
so for a file of POOL_BYTES or more, batches of records go to a pool of one worker process per core
(`cores()`) and come back in order with their redaction counts. The result is what one process
gives: each worker has a Scrubber made from the same config (its cache changes no result), runs
the same `parse_record` on the same records, and the caller reads them in the file's order.
A worker that dies or raises is an error naming the file, not a hang.

Workers are started with 'spawn' (a fresh interpreter that imports this module, what it imports
and, as spawn does, the caller's main module under a `__main__` guard): forking a process with
threads (a Prefect flow run has some) can deadlock the child.

Not done: reading the file in the workers (the caller reads and decodes the rows, ~6x faster
than they are scrubbed, and they travel pickled, ~10 MB each way for 10 MB of records); files
under POOL_BYTES stay in one process (starting the workers costs ~0.4 s). The pool adds CPU work
(~40-60% on a 10 MB file, bench/scrub.py): on a machine whose cores other jobs already hold it
is no faster than one process.
"""

from __future__ import annotations

import os
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from multiprocessing import get_context
from pathlib import Path

from flywheel.production_logs import RecordError, parse_record
from flywheel.scrub import Scrubber

POOL_BYTES = 8 << 20  # files this large are scrubbed in a pool (starting it costs ~0.5 s)
BATCH = 200  # records per task: ~0.1 s of scrubbing, far more than a task's overhead
AHEAD = 3  # batches in flight per worker: the pool never holds more of the file than that


def parse_rows(rows, scrubber: Scrubber, counts: Counter, default: str, max_chars: int):
    """(where, trace or None, error, preview) for each (where, raw, error) row: the trace, or the
    reason it is quarantined and the scrubbed preview of the raw row."""
    for where, raw, error in rows:
        trace = None
        if not error:
            try:
                trace = parse_record(raw, scrubber, counts, default, max_chars)
            except RecordError as exc:
                error = str(exc)
        preview = str(scrubber.scrub_value(raw, Counter())) if error and raw is not None else ""
        yield where, trace, error, preview


def cores() -> int:
    """The cores this process may run on (os.cpu_count() counts the machine's, which a container
    or a taskset may not give it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def file_bytes(path: str) -> int:
    p = Path(path)
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def parsed(path: str, rows, scrubber: Scrubber, counts: Counter, default: str, max_chars: int,
           workers: int | None = None):  # fmt: skip
    """`parse_rows` over a file's rows, in a pool of `workers` processes (default: one per core
    for a file of POOL_BYTES or more, else none); `counts` gets the redactions."""
    if workers is None:
        workers = cores() if file_bytes(path) >= POOL_BYTES else 1
    if workers <= 1:
        yield from parse_rows(rows, scrubber, counts, default, max_chars)
        return
    setup = ({k: p.pattern for k, p in scrubber.extra.items()}, scrubber.defaults, default, max_chars)
    rows = iter(rows)
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_start, initargs=setup)
    try:
        pending: deque = deque()
        while True:
            while len(pending) < workers * AHEAD and (batch := list(islice(rows, BATCH))):
                pending.append(pool.submit(_parse_batch, batch))
            if not pending:
                break
            try:
                out, found = pending.popleft().result()
            except BrokenProcessPool as exc:
                raise RuntimeError(f"ingest {path}: a scrubbing worker process died ({exc})") from exc
            except Exception as exc:  # noqa: BLE001 (any failure in a worker: named, with the file)
                raise RuntimeError(f"ingest {path}: scrubbing failed in a worker process: {exc!r}") from exc
            counts.update(found)
            yield from out
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_WORKER: dict = {}


def _start(patterns: dict, defaults: bool, default: str, max_chars: int) -> None:
    _WORKER.update(scrubber=Scrubber(patterns, defaults), default=default, max_chars=max_chars)


def _parse_batch(rows: list) -> tuple[list, Counter]:
    counts = Counter()
    out = list(parse_rows(rows, _WORKER["scrubber"], counts, _WORKER["default"], _WORKER["max_chars"]))
    return out, counts
