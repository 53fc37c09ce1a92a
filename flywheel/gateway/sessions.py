"""Which session a call belongs to, and the open sessions' state.

A session is what one agent run made: its calls, each with the choices it returned. A
call joins a session, in this order of precedence:

1. by the client's own id for it: the `X-Flywheel-Session` header, else `metadata.session_id`,
   else the `user` parameter (which groups all of that user's calls until the session is
   rewarded or times out);
2. by conversation prefix: its messages extend an earlier call's messages plus one of that
   call's replies (as the agent sent the reply back: content, and tool calls by name and
   arguments; ids and whitespace around JSON do not matter). It continues that session,
   from that reply: the call's `parent`;
3. else it starts a session.

A call of a keyed session whose messages extend one of the session's replies also gets
that reply as its parent. Prefixes are looked up per client (API key), so two users whose
conversations happen to coincide never share a session. A rewarded or timed-out session is
closed: later calls with the same key start a new one. A call still being generated when
its session closes starts a new session, without a parent.

Lookups are by a rolling hash over the canonical messages, so finding the parent of a call
with m messages costs O(m), whatever the number of open sessions.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field


@dataclass
class Choice:
    text: str  # the model's text: the decode of token_ids
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    message: dict  # the reply as the client got it (lake MESSAGE shape, calls with ids)


@dataclass
class Call:
    index: int
    created_at: str  # ISO time
    model: str
    messages: list[dict]  # normalised request messages (protocol.py)
    tools: list[dict] | None
    options: dict
    prompt_ids: list[int]
    parent: tuple[int, int] | None  # (call index, choice index) this call's messages extend
    continued: bool  # prompt_ids built on the parent's ids (prompts.py)
    choices: list[Choice] = field(default_factory=list)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["choices"] = [c.__dict__ for c in self.choices]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Call":
        d = dict(d)
        d["choices"] = [Choice(**c) for c in d["choices"]]
        d["parent"] = tuple(d["parent"]) if d["parent"] is not None else None
        return cls(**d)


@dataclass
class Session:
    id: str
    key: str  # the client's id for it, "" when grouped by prefix
    grouped_by: str  # header, metadata, user, prefix
    client: str
    workload: str
    started_at: str
    last_at: float  # time.time() of the last call (monotonic time does not survive a restart)
    calls: list[Call] = field(default_factory=list)

    def header(self) -> dict:
        return {k: getattr(self, k) for k in ("id", "key", "grouped_by", "client", "workload", "started_at")}


def new_session_id() -> str:
    return uuid.uuid4().hex


def canonical(message: dict) -> list:
    calls = [[c["name"], _canonical_args(c["arguments"])] for c in message.get("tool_calls") or []]
    return [message["role"], message.get("content") or "", calls]


def _canonical_args(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except ValueError:
        return arguments


def prefix_hashes(client: str, messages: list[dict]) -> list[str]:
    """h[i]: the hash of messages[:i+1] (and the client)."""
    out, h = [], hashlib.sha256(client.encode()).hexdigest()
    for m in messages:
        h = hashlib.sha256((h + json.dumps(canonical(m), ensure_ascii=False)).encode()).hexdigest()
        out.append(h)
    return out


def reply_hash(client: str, messages: list[dict], reply: dict) -> str:
    return prefix_hashes(client, [*messages, reply])[-1]


class SessionBook:
    """The open sessions and their indexes. Used from the event loop's thread only."""

    def __init__(self):
        self.open: dict[str, Session] = {}
        self.keys: dict[tuple[str, str], str] = {}  # (client, key) -> session id
        # reply hash -> every (session, call, choice) with it, oldest first: concurrent runs
        # of one task (a group's k samples) often send the same reply back word for word
        self.replies: dict[str, list[tuple[str, int, int]]] = {}
        self.owned: dict[str, list[str]] = {}  # session id -> its reply hashes

    def find(self, client: str, key: str | None, messages: list[dict]):
        """(session or None, parent (call, choice) or None, reply_at): reply_at is the index in
        `messages` of the parent reply, or -1."""
        session = self.open.get(self.keys.get((client, key), "")) if key else None
        hashes = prefix_hashes(client, messages)
        for at in range(len(messages) - 1, -1, -1):
            if messages[at]["role"] != "assistant":
                continue
            hits = self.replies.get(hashes[at], [])
            if session is not None:  # a keyed session continues only its own replies
                hits = [h for h in hits if h[0] == session.id]
            if not hits or (key and session is None):  # a new keyed session adopts no reply
                continue
            sid, call, choice = hits[-1]  # unkeyed: the latest session with that reply
            return self.open[sid], (call, choice), at
        return session, None, -1

    def start(self, session: Session) -> None:
        self.open[session.id] = session
        if session.key:
            self.keys[(session.client, session.key)] = session.id

    def add(self, session: Session, call: Call) -> None:
        session.calls.append(call)
        self.index(session, call)

    def index(self, session: Session, call: Call) -> None:
        """Make the call's replies findable by prefix (a recovered session's calls too)."""
        for j, choice in enumerate(call.choices):
            h = reply_hash(session.client, call.messages, choice.message)
            self.replies.setdefault(h, []).append((session.id, call.index, j))
            self.owned.setdefault(session.id, []).append(h)

    def lookup(self, client: str | None, ref: str) -> Session | None:
        """A session by its id, or by the client's key for it."""
        session = self.open.get(ref)
        if session is None and client is not None:
            session = self.open.get(self.keys.get((client, ref), ""))
        if session is not None and client is not None and session.client != client:
            return None  # another client's session: not found, to this one
        return session

    def close(self, session: Session) -> None:
        self.open.pop(session.id, None)
        if session.key and self.keys.get((session.client, session.key)) == session.id:
            del self.keys[(session.client, session.key)]
        for h in self.owned.pop(session.id, []):
            left = [hit for hit in self.replies.get(h, []) if hit[0] != session.id]
            if left:
                self.replies[h] = left
            else:
                self.replies.pop(h, None)

    def idle(self, now: float, timeout_s: float) -> list[Session]:
        return [s for s in self.open.values() if now - s.last_at >= timeout_s]
