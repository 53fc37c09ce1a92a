"""Sessions kept across restarts (the spool), and written to the lake once (the rows).

The spool is a directory of journals, one per open session (`<session id>.jsonl`): a header
line, one line per call (written before the reply goes back to the client) and, once the
session is decided, a close line (its reward or the timeout). On start the gateway reads
every journal (`Spool.recover`; a last line cut by a kill is dropped and the journal
rewritten without it): a session the lake already holds is done (the kill came between the
lake's write and the journal's removal), a closed one is written now, an open one goes
on, its timeout counted from its last call. Only then is the journal removed. So a session
reaches the lake whole (one file, written under a temporary name and renamed) or not yet,
and never twice: the file is named by the session's id (storage/sessions.py).

Without `gateway.fsync` a journal line is in the operating system's cache once written,
which survives a killed gateway but not a machine that loses power. Not done: a journal
line holds the call's whole prompt, so a session's journal (and its rows) grow with the
square of its length; and one spool per gateway process (two sharing one are not supported).

Rows (`session_rows`): one per (call, choice). Before anything is written every text of
the session goes through the scrubber (flywheel/production/scrub.py, handed in by whoever
builds the gateway). When it changed anything, the session is `scrubbed`: its token ids
and logprobs are dropped (they would spell what was removed, and no longer match the text),
so it is kept for SFT on the scrubbed text or for evaluation, never for RL.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from flywheel.gateway.sessions import Call, Session

DONE_KEEP_S = 86_400.0  # a day: how long a written session's key still answers a retried reward


class Spool:
    def __init__(self, directory: str | Path, fsync: bool = False):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync

    def _path(self, session_id: str) -> Path:
        return self.dir / f"{session_id}.jsonl"

    def _append(self, session_id: str, record: dict) -> None:
        with open(self._path(session_id), "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def start(self, session: Session) -> None:
        self._append(session.id, {"kind": "session", **session.header()})

    def call(self, session: Session, call: Call) -> None:
        self._append(session.id, {"kind": "call", "call": call.to_json()})

    def close(self, session: Session, outcome: dict) -> None:
        self._append(session.id, {"kind": "close", **outcome})

    def remove(self, session_id: str) -> None:
        self._path(session_id).unlink(missing_ok=True)

    def done(self, session: Session) -> None:
        """The session is in the lake: its journal goes, a tombstone naming it by the client's
        key stays (`DONE_KEEP_S`), so a reward retried by key after a restart is answered."""
        if session.key:
            tmp = self.dir / f"{session.id}.done.tmp"
            tmp.write_text(json.dumps({"id": session.id, "key": session.key, "client": session.client,
                                       "at": time.time()}), encoding="utf-8")  # fmt: skip
            tmp.replace(self.dir / f"{session.id}.done")
        self.remove(session.id)

    def tombstones(self, keep_s: float = DONE_KEEP_S) -> list[dict]:
        """The recent tombstones; older ones are deleted."""
        out = []
        for path in self.dir.glob("*.done"):
            with contextlib.suppress(OSError, ValueError):
                stone = json.loads(path.read_text(encoding="utf-8"))
                if time.time() - stone["at"] > keep_s:
                    path.unlink()
                else:
                    out.append(stone)
        return out

    def recover(self) -> list[tuple[Session, dict | None]]:
        """Every journal's session and its close record (None: still open)."""
        out = []
        for path in sorted(self.dir.glob("*.jsonl")):
            lines, whole = [], True
            for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    whole = False  # a line cut by a kill (only ever the last): dropped
                    break
                whole = whole and line.endswith("\n")
            if not lines or lines[0].get("kind") != "session":
                path.unlink()  # killed before its header was whole: no call of it was answered
                continue
            if not whole:  # rewrite it without the cut line, so that appends start on a line of their own
                tmp = path.with_suffix(".tmp")
                tmp.write_text(
                    "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8"
                )
                tmp.replace(path)
            head = lines[0]
            session = Session(head["id"], head["key"], head["grouped_by"], head["client"], head["workload"],
                              head["started_at"], 0.0)  # fmt: skip
            close = None
            for record in lines[1:]:
                if record["kind"] == "call":
                    session.calls.append(Call.from_json(record["call"]))
                elif record["kind"] == "close":
                    close = record
            session.last_at = max(
                [_stamp(c.created_at) for c in session.calls] or [_stamp(session.started_at)]
            )
            out.append((session, close))
        return out


def _stamp(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def session_rows(session: Session, outcome: dict, policy: str, scrubber=None) -> tuple[list[dict], bool]:
    """The session's lake rows (storage/sessions.py SESSION_SCHEMA) and whether the scrubber
    changed it. outcome: {"reason", "reward" (None: unlabelled), "reward_json", "closed_at"}."""
    counts: Counter = Counter()
    rows = []
    for call in session.calls:
        for j, choice in enumerate(call.choices):
            parent = call.parent or (-1, -1)
            rows.append({
                "session_id": session.id, "session_key": session.key, "grouped_by": session.grouped_by,
                "client": session.client, "workload": session.workload,
                "call_index": call.index, "choice_index": j, "parent_call": parent[0], "parent_choice": parent[1],
                "continued": call.continued, "created_at": datetime.fromisoformat(call.created_at),
                "model": call.model, "policy": policy,
                "messages": call.messages, "tools_json": json.dumps(call.tools) if call.tools else "",
                "request_json": json.dumps(call.options, sort_keys=True), "response": choice.message,
                "completion_text": choice.text, "prompt_token_ids": call.prompt_ids,
                "completion_token_ids": choice.token_ids, "completion_logprobs": choice.logprobs,
                "finish_reason": choice.finish_reason,
            })  # fmt: skip
    scrubbed = False
    if scrubber is not None:
        texts = (
            "session_key",
            "messages",
            "tools_json",
            "request_json",
            "response",
            "completion_text",
            "model",
        )
        for row in rows:
            for key in texts:
                before = row[key]
                row[key] = scrubber.scrub_value(before, counts)
                scrubbed = scrubbed or row[key] != before
    reward = outcome.get("reward")
    for row in rows:
        if scrubbed:  # the ids would spell what the scrubber removed: none are kept
            row["prompt_token_ids"], row["completion_token_ids"], row["completion_logprobs"] = [], [], []
        row.update(
            reward=reward,
            reward_json=outcome.get("reward_json", ""),
            labelled=reward is not None,
            scrubbed=scrubbed,
            redactions_json=json.dumps(dict(counts), sort_keys=True),
            closed_reason=outcome["reason"],
            closed_at=datetime.fromisoformat(outcome["closed_at"]),
        )
    return rows, scrubbed
