"""Offline mode (tasks/agent_runs.py): the generate stage of a real run (Runtime: the tiny
random-weight model on the `hf` engine, bubblewrap, a local lake) runs a user's agent, a
tool-calling loop of a few lines on the real `openai` SDK, in sandboxes that reach the
gateway and nothing else; its sessions are the cycle's rollouts, scored by the task's
verifier or, without one, by what the agent returned."""

from __future__ import annotations

import json
import math
import socket
import threading

import pytest

from flywheel.config import FlywheelConfig
from flywheel.environments.sandbox.bwrap import check_available
from flywheel.gateway.trajectories import session_trajectories
from flywheel.run.runtime import Runtime
from flywheel.storage.lake import Lake
from flywheel.storage.sessions import SessionStore
from flywheel.tasks import agent_runs
from flywheel.tasks.agent_runs import agent_source, session_id
from flywheel.tasks.generate import generate
from flywheel.tasks.score import score

pytestmark = pytest.mark.skipif(check_available() is not None, reason="bubblewrap cannot run here")

TOOL_AGENT = """
import openai

TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]


def run(task, base_url):
    client = openai.OpenAI(base_url=base_url, api_key="unused")
    messages, received = list(task["prompt"]), []
    for _ in range(2):  # a tool-calling loop; a random model calls nothing, so it is asked twice
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS,
                                               max_tokens=6, temperature=1.0).choices[0].message
        received.append(reply.content or "")
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})
        if not reply.tool_calls:
            messages.append({"role": "user", "content": "Check it, then answer again."})
    return {"answer": received[-1], "reward": 0.25, "received": received}
"""

PROBING_AGENT = """
import os, socket
import openai


def attempt(fn):
    try:
        fn()
        return "reached"
    except OSError as exc:
        return type(exc).__name__


def run(task):
    out = {
        "internet": attempt(lambda: socket.create_connection(("1.1.1.1", 80), timeout=2)),
        "host_port": attempt(lambda: socket.create_connection(("127.0.0.1", int(os.environ["HOST_PORT"])), timeout=2)),
        "host_file": attempt(lambda: open(os.environ["HOST_FILE"]).read()),
        "passwd": attempt(lambda: open("/etc/passwd").read()),
    }
    client = openai.OpenAI(max_retries=0)  # its base_url and key from the environment
    reply = client.chat.completions.create(model="policy", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    out["reply"] = reply.choices[0].message.content
    try:  # a second call is over this run's agent.max_calls
        client.chat.completions.create(model="policy", max_tokens=4, messages=[{"role": "user", "content": "Again"}])
    except openai.RateLimitError as exc:
        out["second"] = exc.code
    return out
"""


def write_tasks(path):
    rows = [{"id": "sum", "prompt": "What is 2 + 3? Answer with the number.", "answer": "5", "verifier": "exact"},
            {"id": "free", "prompt": "Write a greeting.", "verifier": "none"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"file:{path}"


def make_runtime(tmp_path, tiny_model, agent_dir, entry, **agent):
    domain = write_tasks(tmp_path / "tasks.jsonl")
    cfg = FlywheelConfig(
        run_id="agent", runs_dir=str(tmp_path / "runs"), model={"path": tiny_model},
        engine={"backend": "hf", "max_model_len": 1024}, sampler={"domains": [domain], "levels": [1]},
        generation={"k": 2, "max_tokens": 16}, sandbox={"concurrency": 2}, tracking={"backends": []},
        agent={"entry": entry, "path": str(agent_dir), "timeout_s": 60, **agent},
    )  # fmt: skip
    return Runtime(cfg), domain


def tasks_of(rt, domain):
    return rt.domains[domain].make_tasks("train", 1, 0, 10) + rt.domains[domain].make_tasks("eval", 1, 0, 10)


def test_an_sdk_agent_plays_the_generate_stage_and_its_sessions_are_the_rollouts(
    tmp_path, tiny_model, monkeypatch
):
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir()
    (agent_dir / "tool_agent.py").write_text(TOOL_AGENT)
    rt, domain = make_runtime(tmp_path, tiny_model, agent_dir, "tool_agent:run")
    try:
        tasks = tasks_of(rt, domain)
        assert len(tasks) == 2
        ctx = rt.stage_context(0)
        rollouts = generate.fn(rt, ctx, tasks)
        records = score.fn(rt, ctx, rollouts)
        tok = rt.tokenizer
        # the stage run again (as after a kill): every session is in the lake, none is played again
        monkeypatch.setattr(agent_runs, "play", lambda *a: pytest.fail("an agent ran again"))
        again = generate.fn(rt, ctx, tasks)
    finally:
        rt.close()
    assert [(r.task.task_id, r.sample_index) for r in rollouts] == [
        (t.task_id, i) for t in tasks for i in range(2)
    ]
    assert [(a.completion_token_ids, a.episode_score, a.timings) for a in again] == [
        (r.completion_token_ids, r.episode_score, r.timings) for r in rollouts
    ]
    store = SessionStore(Lake(rt.config.lake_uri))
    ids = [session_id(ctx, r.task, r.sample_index) for r in rollouts]
    assert sorted(store.ids()) == sorted(ids)  # one session per run, named by its stable id
    for r, sid in zip(rollouts, ids):
        rows = sorted(store.sessions([sid]).to_pylist(), key=lambda row: row["call_index"])
        returned = json.loads(json.loads(rows[0]["reward_json"])["returned"])
        received = returned["received"]
        assert [row["completion_text"] for row in rows] == received  # the lake has what the agent got
        for row in rows:
            assert tok.decode(row["completion_token_ids"], skip_special_tokens=True) == row["completion_text"]
        assert rows[1]["parent_call"] == 0 and rows[1]["continued"]  # one chain: the rollout
        ids_sampled = [
            t for t, lp in zip(r.completion_token_ids, r.completion_logprobs) if not math.isnan(lp)
        ]
        assert tok.decode(ids_sampled, skip_special_tokens=True) == "".join(received)
        assert r.num_turns == 2 and r.prompt_token_ids == rows[0]["prompt_token_ids"]
        assert (
            tok.decode(r.completion_token_ids).count("Check it, then answer again.") == 1
        )  # the agent's own turn
        [traj] = session_trajectories(store.sessions([sid]))
        assert traj["completion_token_ids"] == r.completion_token_ids
    by_task = {}
    for rec in records:
        by_task.setdefault(rec.task_id, []).append(rec)
    assert {len(v) for v in by_task.values()} == {2}
    assert len({rec.group_id for rec in records}) == 2  # grouped per task, for advantages
    free = next(t.task_id for t in tasks if "greeting" in t.prompt[-1]["content"])
    for rec in records:
        if rec.task_id == free:  # no verifier of its own: the agent's return value
            assert rec.reward == 0.25 and rec.verdict == "fail"
        else:  # the verifier on the agent's answer (a random model's text is not "5")
            assert rec.verdict == "fail" and rec.reward <= 0.0
        assert rec.num_turns == 2 and len(rec.completion_token_ids) > 0
    sources = {json.loads(row["reward_json"])["source"] for row in store.sessions().to_pylist()}
    assert sources == {"verifier", "agent"}


def test_an_agent_reaches_the_gateway_and_nothing_else(tmp_path, tiny_model):
    agent_dir = tmp_path / "agents"
    agent_dir.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("host data")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # a service on the host's own loopback
    threading.Thread(target=lambda: listener.accept(), daemon=True).start()
    (agent_dir / "probe.py").write_text(
        PROBING_AGENT.replace('os.environ["HOST_PORT"]', str(listener.getsockname()[1])).replace(
            'os.environ["HOST_FILE"]', repr(str(secret))
        )
    )
    rt, domain = make_runtime(tmp_path, tiny_model, agent_dir, "probe:run", max_calls=1)
    try:
        tasks = tasks_of(rt, domain)[:1]
        ctx = rt.stage_context(0)
        rollouts = generate.fn(rt, ctx, tasks)
    finally:
        rt.close()
        listener.close()
    store = SessionStore(Lake(rt.config.lake_uri))
    for r in rollouts:
        [row] = store.sessions([session_id(ctx, r.task, r.sample_index)]).to_pylist()
        out = json.loads(json.loads(row["reward_json"])["returned"])
        assert out["internet"] in ("OSError", "ConnectionRefusedError") and out["internet"] != "reached", out
        assert out["host_port"] == "ConnectionRefusedError", out  # the sandbox's loopback is its own
        assert out["host_file"] == "FileNotFoundError" and out["passwd"] == "FileNotFoundError", out
        assert out["reply"] == row["completion_text"]  # while the gateway answered, and recorded it
        assert out["second"] == "session_call_limit", out
        assert r.completion_token_ids and r.num_turns == 1


def test_the_agents_source_is_found_without_importing_it(tmp_path):
    from flywheel.config.agent import AgentConfig
    from flywheel.tasks.agent_runs import AgentError

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('imported on the host')\n")
    (tmp_path / "pkg" / "loop.py").write_text("def run(task):\n    return 1\n")
    files = agent_source(AgentConfig(entry="pkg.loop:run", path=str(tmp_path)))
    assert sorted(files) == ["pkg/__init__.py", "pkg/loop.py"]
    with pytest.raises(AgentError, match="no module 'nowhere'"):
        agent_source(AgentConfig(entry="nowhere:run", path=str(tmp_path)))
    with pytest.raises(ValueError, match="module:function"):
        AgentConfig(entry="not an entry")
    with pytest.raises(AgentError, match="max_source_bytes"):
        agent_source(
            AgentConfig(entry="pkg.loop:run", path=str(tmp_path), max_source_bytes=1024).model_copy(
                update={"max_source_bytes": 10}
            )
        )


def test_the_forwarder_sets_the_runs_session_on_every_request(tmp_path):
    """The sandbox's forwarder (flywheel/gateway/agent_harness.py), here on the host: two
    requests on one connection, one chunked and carrying a session header of the agent's
    own, reach the socket with the run's session header instead, bodies as sent."""
    from flywheel.gateway.agent_harness import start_forwarder

    path = str(tmp_path / "gw.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    seen = []

    def upstream():
        conn, _ = server.accept()
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        seen.append(data)
        conn.sendall(b"done")
        conn.close()

    threading.Thread(target=upstream, daemon=True).start()
    port = start_forwarder(path, "run-session-1")
    client = socket.create_connection(("127.0.0.1", port))
    chunked = b"POST /v1/a HTTP/1.1\r\nX-Flywheel-Session: mine\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    plain = b"POST /v1/b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    client.sendall(chunked + plain)
    client.shutdown(socket.SHUT_WR)
    reply = b""
    while chunk := client.recv(65536):
        reply += chunk
    assert reply == b"done"
    assert seen == [
        b"POST /v1/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Flywheel-Session: run-session-1\r\n\r\n"
        b"3\r\nabc\r\n0\r\n\r\n"
        b"POST /v1/b HTTP/1.1\r\nContent-Length: 5\r\nX-Flywheel-Session: run-session-1\r\n\r\nhello"
    ]
