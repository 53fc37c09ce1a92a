"""The gateway's work, without HTTP: a call in, its reply out and recorded; rewards;
timeouts; recovery after a restart.

`Gateway(engine, tokenizer, store, config, ...)` is built by whoever owns the parts (the
`flywheel gateway` command, tests, the bench): the engine is any of policy/engines/ as it
is, the store a `SessionStore` on the run's lake, and the scrubber (anything with
`scrub_value(value, counts)`, i.e. flywheel/production/scrub.py's `Scrubber`) is handed in,
because production sits beside the gateway in the layers, not below it.

All state changes happen on the event loop's thread; the engine runs on its own
(engine_loop.py) and lake writes on one writer thread, so a slow S3 write never holds a
reply. A write that fails (the store is down) keeps the session's journal and is retried
at every sweep.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flywheel.config.gateway import GatewayConfig
from flywheel.gateway.engine_loop import EngineLoop, Overloaded, apply_stop
from flywheel.gateway.prompts import Prompter
from flywheel.gateway.protocol import ChatRequest, GatewayError, bad
from flywheel.gateway.recording import Spool, now_iso, session_rows
from flywheel.gateway.replies import response_message, split_reply
from flywheel.gateway.rewards import parse_reward, timeout_outcome
from flywheel.gateway.sessions import Call, Choice, Session, SessionBook, new_session_id
from flywheel.policy.engines.base import Engine, SamplingSpec
from flywheel.storage.sessions import SAFE_ID, SessionStore

log = logging.getLogger("flywheel.gateway")


class Gateway:
    def __init__(self, engine: Engine, tokenizer, store: SessionStore, config: GatewayConfig, *,
                 spool_dir: str | Path, max_model_len: int, policy: str = "", scrubber=None,
                 tool_format: str = "auto", api_keys: list[str] | None = None, key_is_id: bool = False):  # fmt: skip
        self.config, self.store, self.scrubber, self.policy = config, store, scrubber, policy
        # offline mode (tasks/agent_runs.py): a keyed session's id is its key, a stable id per
        # task and sample that the runner made, so a retried stage finds its sessions in the lake
        self.key_is_id = key_is_id
        self.tok, self.max_model_len = tokenizer, max_model_len
        self.keys = {k: "key-" + hashlib.sha256(k.encode()).hexdigest()[:12] for k in api_keys or [] if k}
        if not config.loopback and not self.keys:
            raise ValueError(
                f"the gateway listens on {config.host}, not loopback: it needs API keys "
                f"(comma-separated in ${config.api_keys_env})"
            )
        self.prompter = Prompter(tokenizer, tool_format)
        self.loop = EngineLoop(engine, tokenizer, config.max_pending)
        self.book = SessionBook()
        self.spool = Spool(spool_dir, config.fsync)
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="gateway-writer")
        self.unwritten: dict[str, tuple[Session, dict]] = {}
        self.closed: dict[tuple[str, str], str] = {}  # (client, key) -> the id of its written session
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, at)
        self.recovered = self.recover()

    # ---- who is calling ----------------------------------------------------------------
    def client_of(self, authorization: str | None) -> str:
        if not self.keys:
            return "local"
        token = (authorization or "").removeprefix("Bearer ").strip()
        client = self.keys.get(token)
        if client is None:
            raise GatewayError(401, "invalid or missing API key (Authorization: Bearer <key>)",
                               "authentication_error", None, "invalid_api_key")  # fmt: skip
        return client

    def admit(self, client: str) -> None:
        """A token bucket per client: `requests_per_minute`, bursts up to a minute's worth."""
        rate = self.config.requests_per_minute
        if not rate:
            return
        now = time.monotonic()
        tokens, at = self.buckets.get(client, (float(rate), now))
        tokens = min(float(rate), tokens + (now - at) * rate / 60.0)
        if tokens < 1.0:
            raise GatewayError(
                429,
                f"rate limit: {rate} requests per minute per client",
                "rate_limit_exceeded",
                None,
                "rate_limit_exceeded",
            )
        self.buckets[client] = (tokens - 1.0, now)

    # ---- a call ------------------------------------------------------------------------
    async def complete(self, req: ChatRequest, client: str, key: str | None, grouped_by: str,
                       workload: str) -> tuple[Session, Call]:  # fmt: skip
        if self.config.strict_model and req.model != self.config.model_name:
            raise GatewayError(
                404,
                f"model {req.model!r} is not served here; /v1/models lists {self.config.model_name!r}",
                "invalid_request_error",
                "model",
                "model_not_found",
            )
        session, parent, at = self.book.find(client, key, req.messages)
        limit = self.config.max_calls_per_session
        if limit and session is not None and len(session.calls) >= limit:
            raise GatewayError(429, f"this session made its {limit} calls (gateway.max_calls_per_session)",
                               "rate_limit_exceeded", None, "session_call_limit")  # fmt: skip
        tools = req.tools if req.tool_choice != "none" else None
        prompt, continued = None, False
        if parent is not None:
            before = session.calls[parent[0]]
            if (
                before.tools == req.tools
                and before.options.get("tool_choice") == req.tool_choice
                and before.prompt_ids
            ):
                choice = before.choices[parent[1]]
                sequence = before.prompt_ids + choice.token_ids
                prompt = self.prompter.continued(sequence, req.messages, at, choice.text, tools)
                continued = True
        if prompt is None:
            prompt = self.prompter.fresh(req.messages, tools)
        room = self.max_model_len - len(prompt)
        if room < 1 or (req.max_tokens is not None and req.max_tokens > room):
            raise bad(
                f"the prompt is {len(prompt)} tokens and max_tokens {req.max_tokens or '-'}; the engine's "
                f"context is {self.max_model_len} tokens",
                "messages",
                "context_length_exceeded",
            )
        spec = SamplingSpec(n=req.n, temperature=req.temperature, top_p=req.top_p,
                            max_tokens=min(req.max_tokens or self.config.max_tokens, room), seed=req.seed)  # fmt: skip
        try:
            future = self.loop.submit(prompt, spec)
        except Overloaded as exc:
            raise GatewayError(
                503, f"the engine is busy: {exc}; retry later", "server_error", None, "overloaded"
            )
        try:
            samples = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001  (the engine failed this request)
            log.exception("generation failed")
            raise GatewayError(500, f"generation failed: {exc}", "server_error") from exc
        names = req.tool_names if tools else []
        choices = []
        for s in samples:
            s = apply_stop(self.tok, s, req.stop)
            content, calls = split_reply(s.text, self.prompter.fmt, names, req.parallel_tool_calls)
            calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", **c} for c in calls]
            finish = "tool_calls" if calls else s.finish_reason
            choices.append(Choice(s.text, s.token_ids, s.logprobs, finish, response_message(content, calls)))
        return self._record(
            req, client, key, grouped_by, workload, session, parent, continued, prompt, choices
        )

    def _record(self, req, client, key, grouped_by, workload, session, parent, continued, prompt, choices):
        if session is None or session.id not in self.book.open:  # new, or closed while this call ran
            parent, continued = None, False
            joined = self.book.open.get(self.book.keys.get((client, key), "")) if key else None
            sid = key if self.key_is_id and key and SAFE_ID.match(key) else new_session_id()
            session = joined or Session(sid, key or "", grouped_by, client, workload, now_iso(), 0.0)
            if joined is None:
                self.book.start(session)
                self.spool.start(session)
        call = Call(len(session.calls), now_iso(), req.model, req.messages, req.tools, req.options(), prompt,
                    parent, continued, choices)  # fmt: skip
        self.spool.call(session, call)  # before the reply leaves: a reply the client got is in the journal
        self.book.add(session, call)
        session.last_at = time.time()
        return session, call

    # ---- closing -----------------------------------------------------------------------
    async def reward(self, client: str | None, ref: str, body) -> dict:
        outcome = parse_reward(body)
        session = self.book.lookup(client, ref)
        if session is None:
            ref = self.closed.get((client or "local", ref), ref)  # a key whose session was closed
            if ref in self.unwritten:
                return {"session_id": ref, "status": "pending", "note": "closed before; its write is retried"}
            if SAFE_ID.match(ref) and await asyncio.to_thread(self.store.has, ref):
                return {"session_id": ref, "status": "written", "note": "written before; nothing changed"}
            raise GatewayError(
                404, f"no open session {ref!r}", "invalid_request_error", "session", "session_not_found"
            )
        written = await self.close(session, outcome)
        return {"session_id": session.id, "status": "written" if written else "pending",
                "reward": outcome["reward"], "calls": len(session.calls)}  # fmt: skip

    async def close(self, session: Session, outcome: dict) -> bool:
        self.book.close(session)
        self._remember(session)
        self.spool.close(session, outcome)
        return await asyncio.wrap_future(self.writer.submit(self._write, session, outcome))

    def _remember(self, session: Session) -> None:
        """A closed session's key still finds it (a reward retried by key): the latest 100k."""
        if session.key:
            self.closed.pop((session.client, session.key), None)
            self.closed[(session.client, session.key)] = session.id
            if len(self.closed) > 100_000:
                del self.closed[next(iter(self.closed))]

    def _write(self, session: Session, outcome: dict) -> bool:
        """Runs on the writer thread. True when the session is in the lake (now or before)."""
        try:
            rows, _ = session_rows(session, outcome, self.policy, self.scrubber)
            self.store.write(session.id, rows)
        except Exception:  # noqa: BLE001  (the store is down: keep the journal, retry at the next sweep)
            log.exception("writing session %s failed; retried later", session.id)
            self.unwritten[session.id] = (session, outcome)
            return False
        self.unwritten.pop(session.id, None)
        self.spool.done(session)
        return True

    async def sweep(self) -> int:
        """Close the sessions idle past the timeout (unlabelled); retry failed writes."""
        closed = 0
        for session in self.book.idle(time.time(), self.config.session_timeout_s):
            await self.close(session, timeout_outcome())
            closed += 1
        for session, outcome in list(self.unwritten.values()):
            await asyncio.wrap_future(self.writer.submit(self._write, session, outcome))
        return closed

    def recover(self) -> dict:
        """The journals of a previous run of the gateway: done, written now, or open again."""
        counts = {
            "temporary_files": self.store.clean_temporary(),
            "already_written": 0,
            "written": 0,
            "reopened": 0,
        }
        for stone in self.spool.tombstones():
            self.closed[(stone["client"], stone["key"])] = stone["id"]
        for session, close in self.spool.recover():
            if self.store.has(session.id):
                self._remember(session)
                self.spool.done(session)
                counts["already_written"] += 1
            elif close is not None or time.time() - session.last_at >= self.config.session_timeout_s:
                outcome = close or timeout_outcome()
                if close is None:
                    self.spool.close(session, outcome)
                self._remember(session)
                counts["written"] += self._write(session, outcome)
            else:
                self.book.start(session)
                for call in session.calls:
                    self.book.index(session, call)
                counts["reopened"] += 1
        return counts

    def status(self, client: str | None, ref: str) -> dict:
        session = self.book.lookup(client, ref)
        if session is not None:
            return {"session_id": session.id, "status": "open", "calls": len(session.calls),
                    "grouped_by": session.grouped_by, "key": session.key}  # fmt: skip
        if SAFE_ID.match(ref) and self.store.has(ref):
            return {"session_id": ref, "status": "written"}
        raise GatewayError(
            404, f"no session {ref!r}", "invalid_request_error", "session", "session_not_found"
        )

    def close_engine(self) -> None:
        self.loop.close()
        self.writer.shutdown(wait=True)
