"""The judge's cache in the lake: one row per (judge, rubric, prompt, completion) hash.

    judgements/part-<uuid>.parquet    rows written by one scoring call, each file whole

Append-only and read whole: a file is written atomically (local rename, S3 PUT), so a
reader sees a call's judgements all or none, and two runs sharing a lake share the cache.
Only scores are cached, never failures: a judge that was down is asked again next time.
`flywheel store compact` does not touch these files; at ~100 bytes a row, a million
judgements are ~100 MB, read once per process.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from flywheel.storage.lake import Lake

JUDGEMENT_SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # stable_id of judge model, rubric, prompt, completion
        ("value", pa.float64()),  # the score, normalised to [0, 1]
        ("reply", pa.string()),  # what the judge said
        ("judge", pa.string()),  # its model
        ("created_at", pa.timestamp("us", tz="UTC")),
    ]
)


class JudgeCache:
    def __init__(self, lake: Lake):
        self.lake = lake
        self.dir = lake._path("judgements")
        self._known: dict[str, float] | None = None

    def load(self) -> dict[str, float]:
        if self._known is None:
            selector = pafs.FileSelector(self.dir, allow_not_found=True)
            files = [i.path for i in self.lake.fs.get_file_info(selector) if i.base_name.endswith(".parquet")]
            table = ds.dataset(files, schema=JUDGEMENT_SCHEMA, format="parquet", filesystem=self.lake.fs).to_table(
                columns=["key", "value"]
            )  # fmt: skip
            self._known = dict(zip(table["key"].to_pylist(), table["value"].to_pylist()))
        return self._known

    def get(self, key: str) -> float | None:
        return self.load().get(key)

    def add(self, rows: list[dict]) -> None:
        """rows: {key, value, reply, judge}; written as one file."""
        if not rows:
            return
        now = datetime.now(timezone.utc)
        table = pa.Table.from_pylist([{**r, "created_at": now} for r in rows], schema=JUDGEMENT_SCHEMA)
        self.lake._write_table(f"{self.dir}/part-{uuid.uuid4().hex}.parquet", table)
        self.load().update({r["key"]: r["value"] for r in rows})
