"""The gateway as a part of the generate stage (offline mode, issue 45 item 3): served on a
unix socket from a thread of the stage's own process, on the stage's engine, for the
user's agent runs in their sandboxes (tasks/agent_runs.py runs them).

`LocalGateway(...)` builds a `Gateway` (service.py) whose sessions are keyed by the run's
stable ids (`key_is_id`: a session's id is the id the runner chose for a task and sample)
and serves it with uvicorn on `<dir>/gateway.sock`, a directory of its own that a sandbox
binds read-only; nothing listens on a TCP port of the host. `call` runs a function on the
server's event loop, where all of the gateway's state changes happen (service.py), so the
runner can read a session and close it with its reward from its own threads.

An evaluation's stage (its generation at temperature 0) serves a `GreedyGateway`: every
call is sampled greedily whatever temperature the agent asks for, so the agent's pass@1 is
the greedy policy's, as for the plain sampler's evaluation; the lake records the
temperature used.

A gateway left by a killed stage is picked up by the next: the spool's closed sessions
are written (`Gateway.recover`), and its open ones, whose agent runs died with it, are
dropped (`drop_open`): their runs are run again under the same ids.

Not done: one gateway for several stages or processes (each stage, or each Ray shard,
serves its own), and TCP for agents outside a sandbox.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path

from flywheel.config.gateway import GatewayConfig
from flywheel.gateway.service import Gateway
from flywheel.gateway.sessions import Session
from flywheel.gateway.trajectories import session_trajectories

SOCKET = "gateway.sock"
INSIDE = "/run/flywheel-gateway"  # where a sandbox sees the socket's directory
HARNESS = (Path(__file__).parent / "agent_harness.py").read_text(encoding="utf-8")  # the sandbox's program


class GreedyGateway(Gateway):
    """A gateway whose every call is greedy: temperature 0, top_p 1, no seed (an
    evaluation's; the agent's own settings are overridden before the call is recorded)."""

    async def complete(self, req, *args, **kwargs):
        req.temperature, req.top_p, req.seed = 0.0, 1.0, None
        return await super().complete(req, *args, **kwargs)


class LocalGateway:
    def __init__(self, engine, tokenizer, store, *, spool_dir: str | Path, max_model_len: int, policy: str,
                 tool_format: str, max_tokens: int, max_calls: int, greedy: bool = False):  # fmt: skip
        config = GatewayConfig(
            max_tokens=max_tokens, max_calls_per_session=max_calls, requests_per_minute=0,
            session_timeout_s=7 * 86_400.0,  # closed by the runner; never by the clock mid-stage
            max_pending=4096,
        )  # fmt: skip
        kind = GreedyGateway if greedy else Gateway
        self.gw = kind(engine, tokenizer, store, config, spool_dir=spool_dir, max_model_len=max_model_len,
                       policy=policy, tool_format=tool_format, key_is_id=True)  # fmt: skip
        self.dropped = self.drop_open()
        # the sandbox runs as another user: the directory must be searchable, the socket writable
        self.dir = Path(tempfile.mkdtemp(prefix="flywheel-gw-"))
        self.dir.chmod(0o755)
        self.socket = str(self.dir / SOCKET)
        self.loop = asyncio.new_event_loop()
        self.server = None
        self.thread: threading.Thread | None = None

    def drop_open(self) -> int:
        """Forget the sessions a killed stage left open (before serving: no loop yet)."""
        stale = list(self.gw.book.open.values())
        for session in stale:
            self.gw.book.close(session)
            self.gw.spool.remove(session.id)
        return len(stale)

    def __enter__(self) -> "LocalGateway":
        import uvicorn

        from flywheel.gateway.app import build_app

        self.server = uvicorn.Server(
            uvicorn.Config(build_app(self.gw), uds=self.socket, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self._serve, name="agent-gateway", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the agents' gateway did not start on {self.socket}")
            time.sleep(0.01)
        os.chmod(self.socket, 0o666)
        return self

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.gw.close_engine()  # the engine loop's thread and the writer; the engine is the stage's
        if not self.loop.is_closed() and not self.loop.is_running():
            self.loop.close()
        for path in (Path(self.socket), self.dir):
            try:
                path.unlink() if path.is_socket() else path.rmdir()
            except OSError:
                pass

    # ---- the runner's side, from its threads -------------------------------------------
    def call(self, fn, *args, timeout: float = 600.0):
        """fn(*args) on the server's loop (awaited when it returns an awaitable)."""

        async def run():
            out = fn(*args)
            return await out if asyncio.iscoroutine(out) else out

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def session(self, session_id: str) -> Session | None:
        """The open session of that id (None: the run made no call)."""
        return self.call(lambda: self.gw.book.open.get(session_id))

    def close_session(self, session: Session, outcome: dict) -> bool:
        """Close it with `outcome` (rewards.py); True when it is in the lake."""
        return self.call(self.gw.close, session, outcome)

    def trajectories(self, ids: list[str]) -> dict[str, list[dict]]:
        """The written sessions' trajectories (trajectories.py), by session id; each leaf
        also carries its `finish_reason`."""
        if not ids:
            return {}
        table = self.gw.store.sessions(ids)
        keys = ["session_id", "call_index", "choice_index", "finish_reason"]
        finish = {(r["session_id"], r["call_index"], r["choice_index"]): r["finish_reason"]
                  for r in table.select(keys).to_pylist()}  # fmt: skip
        out: dict[str, list[dict]] = {i: [] for i in ids}
        for traj in session_trajectories(table):
            traj["finish_reason"] = finish[(traj["session_id"], *traj["leaf"])]
            out[traj["session_id"]].append(traj)
        return out

    def outcome_of(self, session_id: str) -> dict:
        """A written session's reward record: reward, reward_json (its first row's)."""
        row = self.gw.store.sessions([session_id]).slice(0, 1).to_pylist()[0]
        return {"reward": row["reward"], "reward_json": row["reward_json"], "labelled": row["labelled"]}
