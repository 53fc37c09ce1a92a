"""Episodes a cycle parked for the next one (partial rollouts, tasks/carry.py), in the lake.

One row per episode of a group that was not finished when its cycle's generate budget
ran out (its finished members too: a group trains together). The episode's state (chat,
tokens, history, steps, score, workspace files) is the runner's own plain data, kept as
JSON text: it is read back whole by the next cycle and queried by nothing else, and a
new field of it needs no schema change.

The rows are written by the archive stage with the cycle's trajectories and listed in its
commit marker (`Lake.commit_tables(extra={"carried": ...})`), so they exist exactly when
the cycle does: a crash before the marker leaves none, a crash after it leaves all, and
the next cycle, committed with its own marker, takes each of them up once. They are read
from the marker's own file list, not through compaction (which never covers them).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from flywheel.storage.schema import SCHEMA_VERSION

CARRIED_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("cycle", pa.int32()),  # the cycle that parked it
        ("started_cycle", pa.int32()),  # the cycle its group began in (its trajectory ids are that cycle's)
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("sample_index", pa.int32()),
        ("finished", pa.bool_()),  # scored already, waiting for the rest of its group
        ("oldest_version", pa.int32()),  # the oldest policy version among its sampled tokens; -1: none yet
        ("state_json", pa.string()),
    ],
    metadata={"flywheel.schema_version": str(SCHEMA_VERSION), "flywheel.record": "carried"},
)


def carried_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=CARRIED_SCHEMA)


def carried_groups(rows: list[dict]) -> int:
    """How many groups `read_carried`'s rows are (a group: the k episodes of a task begun in one cycle)."""
    return len({(r["started_cycle"], r["task_id"]) for r in rows})


def read_carried(lake, run_id: str, cycle: int) -> list[dict]:
    """The episodes committed cycle `cycle` parked ([] when it parked none or is not committed)."""
    if cycle < 0 or not lake.is_committed(run_id, cycle):
        return []
    rows: list[dict] = []
    for name in lake.read_marker(run_id, cycle)["files"]:
        if name.startswith("carried/"):
            with lake.fs.open_input_file(lake._path(name)) as f:
                rows += pq.read_table(f, schema=CARRIED_SCHEMA).to_pylist()
    return rows
