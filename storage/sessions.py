"""Gateway sessions in the lake: one Parquet file per session, written once, whole.

The OpenAI-compatible gateway (flywheel/gateway/) records every call an agent makes and
groups the calls into sessions; a session is written here when it gets a reward or times
out. Layout under the lake root (local or S3, beside the runs' data):

    gateway/sessions/<session id>.parquet    one row per (call, choice) of the session

Exactly once: the file is named by the session's id (made once by the gateway and kept in
its spool across restarts), written whole under a temporary name and renamed (locally; an
S3 PUT is atomic), and `write` does nothing when the file is already there. So a reader
sees a session whole or not at all, and a retried write cannot add it twice.

Rows (`SESSION_SCHEMA`): the call's messages as the client sent them and the reply as it
received it (scrubbed), the engine's prompt and completion token ids and the per-token
log-probabilities, which call and choice this call continued (`parent_call`,
`parent_choice`; -1 for none), and the session's outcome repeated on each row: `reward`
(null when unlabelled), `labelled`, `scrubbed`, `closed_reason`.

`scrubbed` is true when the scrubber changed any text of the session: its token ids would
still spell what was removed, so they are not stored (empty lists), and the session is kept
for reading, SFT on the scrubbed text or evaluation, never for RL, whose loss needs the ids
the engine sampled. Unlabelled sessions (`labelled` false) are kept and not trained on,
unless a later label record names them (storage/live_sessions.py: the file here is never
rewritten).

The schema lives here rather than in storage/schema.py: it is the gateway's own record, and
its version is this module's `SESSION_SCHEMA_VERSION`, not the lake's cycles'.
Not done: compaction of many small session files into larger ones.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from flywheel.storage.lake import Lake
from flywheel.storage.schema import MESSAGE

SESSION_SCHEMA_VERSION = 1
SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")  # the gateway makes hex ids; nothing else names a file

SESSION_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("session_key", pa.string()),  # the client's own id for it (header, user, metadata), "" by prefix
        ("grouped_by", pa.string()),  # header, user, metadata or prefix
        ("client", pa.string()),  # which API key (a hash of it), "local" without keys
        ("workload", pa.string()),
        ("call_index", pa.int32()),
        ("choice_index", pa.int32()),
        ("parent_call", pa.int32()),  # the call whose reply this call's messages extend; -1: none
        ("parent_choice", pa.int32()),
        ("continued", pa.bool_()),  # prompt ids = the parent's prompt + reply + the new messages' ids
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("model", pa.string()),  # the model name the client asked for
        ("policy", pa.string()),  # what served it (run and policy version, or the model dir)
        ("messages", pa.list_(MESSAGE)),  # the request's messages, as sent (scrubbed)
        ("tools_json", pa.string()),
        ("request_json", pa.string()),  # the request's other options (temperature, n, stop, ...)
        ("response", MESSAGE),  # the reply as the client received it (content, tool_calls)
        ("completion_text", pa.string()),  # the model's text: the decode of completion_token_ids
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float32())),
        ("finish_reason", pa.string()),
        ("reward", pa.float64()),  # null: unlabelled
        ("reward_json", pa.string()),  # the reward call's components and note
        ("labelled", pa.bool_()),
        ("scrubbed", pa.bool_()),  # text changed by the scrubber: no token ids, not for RL
        ("redactions_json", pa.string()),
        ("closed_reason", pa.string()),  # reward, timeout
        ("closed_at", pa.timestamp("us", tz="UTC")),
    ],
    metadata={
        "flywheel.session_schema_version": str(SESSION_SCHEMA_VERSION),
        "flywheel.record": "gateway_session",
    },
)


class SessionStore:
    def __init__(self, lake: Lake):
        self.lake = lake

    def path(self, session_id: str) -> str:
        if not SAFE_ID.match(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.lake._path("gateway", "sessions", f"{session_id}.parquet")

    def has(self, session_id: str) -> bool:
        return self.lake.fs.get_file_info(self.path(session_id)).type == pafs.FileType.File

    def write(self, session_id: str, rows: list[dict]) -> bool:
        """Write the session's rows unless it is there already; True when this call wrote it."""
        if self.has(session_id):
            return False
        self.lake._write_table(self.path(session_id), pa.Table.from_pylist(rows, schema=SESSION_SCHEMA))
        return True

    def ids(self) -> list[str]:
        """Every session written (temporary names of a killed write are not sessions)."""
        selector = pafs.FileSelector(self.lake._path("gateway", "sessions"), allow_not_found=True)
        names = [i.base_name for i in self.lake.fs.get_file_info(selector) if i.type == pafs.FileType.File]
        return sorted(n[: -len(".parquet")] for n in names if n.endswith(".parquet"))

    def clean_temporary(self) -> int:
        """Delete what a write killed before its rename left (a gateway's start-up: it is the
        only writer of its sessions)."""
        selector = pafs.FileSelector(self.lake._path("gateway", "sessions"), allow_not_found=True)
        stale = [i.path for i in self.lake.fs.get_file_info(selector) if ".parquet.tmp-" in i.base_name]
        for path in stale:
            self.lake.fs.delete_file(path)
        return len(stale)

    def sessions(self, ids: list[str] | None = None) -> pa.Table:
        """The rows of the sessions written (or of `ids`), through the current schema."""
        files = [self.path(i) for i in (self.ids() if ids is None else ids)]
        return ds.dataset(files, schema=SESSION_SCHEMA, format="parquet", filesystem=self.lake.fs).to_table()
