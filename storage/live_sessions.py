"""Live sessions' later labels and the cycles' claims on them: small JSON records beside
the sessions, each written once, whole.

    gateway/labels/<session id>.json              a reward that reached a session after it
                                                  was written: {reward, source, detail, at}
    gateway/claims/run=<run>/cycle=<n>.json       the sessions cycle n of the run took:
                                                  {sessions: [{id, use, advantage, ...}], ...}

Why a label record rather than rewriting the session: a session file is written once and
never changed (storage/sessions.py), so a reader never sees it half-relabelled and a
copy of the lake taken at any moment is consistent; a label is one small object whose
existence is the label. The first label wins (`LabelStore.write` does nothing when one is
there), so a session has one reward, whoever gave it first: its caller (in the session
itself; then no label is written), ingested feedback, or its workload's verifier.

A claim is written before the cycle's update and never changed: the update reads it (and
only it) for its live samples, and a session named in one claim of a run is never taken
by another. The update of a cycle is done once (storage/policies.py's manifest, read by
flywheel/run/lifecycle.py), and a cycle killed after its claim reads the same claim again,
so each live session is trained on at most once.

Not done: two labellers or two claimers racing on one lake (each checks before it writes;
run one flywheel per run, as the lifecycle already assumes).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow.fs as pafs

from flywheel.storage.lake import Lake
from flywheel.storage.sessions import SAFE_ID


def _exists(lake: Lake, path: str) -> bool:
    return lake.fs.get_file_info(path).type == pafs.FileType.File


def _names(lake: Lake, *parts: str) -> list[str]:
    selector = pafs.FileSelector(lake._path(*parts), allow_not_found=True)
    return sorted(i.base_name for i in lake.fs.get_file_info(selector) if i.type == pafs.FileType.File)


class LabelStore:
    def __init__(self, lake: Lake):
        self.lake = lake

    def path(self, session_id: str) -> str:
        if not SAFE_ID.match(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.lake._path("gateway", "labels", f"{session_id}.json")

    def write(self, session_id: str, reward: float, source: str, detail: dict) -> bool:
        """Label the session unless it is labelled already; True when this call labelled it."""
        path = self.path(session_id)
        if _exists(self.lake, path):
            return False
        record = {"session_id": session_id, "reward": float(reward), "source": source, "detail": detail,
                  "at": datetime.now(timezone.utc).isoformat()}  # fmt: skip
        self.lake._write_bytes(path, json.dumps(record, sort_keys=True, default=str).encode())
        return True

    def all(self) -> dict[str, dict]:
        """Every label, by session id."""
        out = {}
        for name in _names(self.lake, "gateway", "labels"):
            if name.endswith(".json"):
                out[name[: -len(".json")]] = self.lake._read_json(self.lake._path("gateway", "labels", name))
        return out


class ClaimStore:
    def __init__(self, lake: Lake, run_id: str):
        self.lake, self.run_id = lake, run_id

    def path(self, cycle: int) -> str:
        return self.lake._path("gateway", "claims", f"run={self.run_id}", f"cycle={cycle}.json")

    def read(self, cycle: int) -> dict | None:
        path = self.path(cycle)
        return self.lake._read_json(path) if _exists(self.lake, path) else None

    def write(self, cycle: int, claim: dict) -> dict:
        """Write cycle's claim unless it has one; the claim in the lake either way."""
        before = self.read(cycle)
        if before is not None:
            return before
        self.lake._write_bytes(self.path(cycle), json.dumps(claim, sort_keys=True, default=str).encode())
        return claim

    def all(self) -> dict[int, dict]:
        """Every claim of the run, by cycle."""
        out = {}
        for name in _names(self.lake, "gateway", "claims", f"run={self.run_id}"):
            if name.startswith("cycle=") and name.endswith(".json"):
                cycle = int(name[len("cycle=") : -len(".json")])
                out[cycle] = self.lake._read_json(self.path(cycle))
        return out

    def claimed(self, except_cycle: int | None = None) -> set[str]:
        """The session ids any claim of the run names (but `except_cycle`'s)."""
        return {s["id"] for c, claim in self.all().items() if c != except_cycle for s in claim["sessions"]}
