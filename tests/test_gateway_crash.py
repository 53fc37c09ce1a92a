"""The gateway (flywheel/gateway/) killed mid-session: a journal line cut by a kill is the
only thing lost, and `flywheel gateway serve`, run in a process of its own and killed with
kill -9 while rewards and a call are in flight, leaves each session in the lake whole or
going on after a restart, never twice."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

from flywheel.storage.lake import Lake
from flywheel.storage.seaweed import free_port
from flywheel.storage.sessions import SessionStore

from .gateway_fixtures import ScriptedEngine, make_gateway, serving


def test_a_journal_cut_by_a_kill_loses_its_cut_line_only(hf, tmp_path):
    from flywheel.gateway.recording import Spool

    gw = make_gateway(ScriptedEngine(hf.tokenizer), hf.tokenizer, tmp_path)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        for text in ("a", "b"):
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": text}],
                extra_headers={"X-Flywheel-Session": "k"},
            )
    [journal] = (tmp_path / "spool").glob("*.jsonl")
    journal.write_text(journal.read_text() + '{"kind": "call", "call": {"ind')  # a kill mid-line
    [(session, close)] = Spool(tmp_path / "spool").recover()
    assert [c.index for c in session.calls] == [0, 1] and close is None
    assert journal.read_text().endswith("}\n")  # rewritten whole: the next line starts on its own
    (tmp_path / "lake" / "gateway" / "sessions").mkdir(parents=True)
    (tmp_path / "lake" / "gateway" / "sessions" / "x.parquet.tmp-123").write_bytes(b"half")
    again = make_gateway(ScriptedEngine(hf.tokenizer), hf.tokenizer, tmp_path)
    assert again.recovered == {"temporary_files": 1, "already_written": 0, "written": 0, "reopened": 1}
    assert again.book.lookup("local", "k").calls[1].choices[0].text == "Let me add.<tool_call>" + (
        '{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>'
    )
    again.close_engine()


def start_gateway(tiny_model, tmp_path, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "flywheel.cli", "gateway", "serve", "--model", tiny_model,
           "--store", str(tmp_path / "lake"), "--port", str(port), "--set", "engine.backend=hf",
           "--set", f"gateway.spool_dir={tmp_path / 'spool'}"]  # fmt: skip
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "gateway.log", "ab"))  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "gateway.log").read_text()[-3000:]
    raise AssertionError("the gateway did not start:\n" + (tmp_path / "gateway.log").read_text()[-3000:])


def test_kill_9_mid_session_leaves_whole_sessions_or_none_and_never_twice(tiny_model, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    proc = start_gateway(tiny_model, tmp_path, port)
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)

    def call(key: str, text: str):
        return client.chat.completions.create(model="flywheel", messages=[{"role": "user", "content": text}],
                                              max_tokens=4, extra_headers={"X-Flywheel-Session": key})  # fmt: skip

    keys = [f"run-{i}" for i in range(12)]
    for key in keys:
        call(key, "first")
    call("run-0", "second")
    store = SessionStore(Lake(str(tmp_path / "lake")))
    with ThreadPoolExecutor(8) as pool:  # rewards in flight, and a call, when the process dies
        futures = [pool.submit(httpx.post, f"{url}/sessions/{k}/reward", json={"reward": 1.0}, timeout=30)
                   for k in keys[:8]]  # fmt: skip
        futures.append(pool.submit(call, "run-9", "second"))
        while not store.ids() and proc.poll() is None:
            time.sleep(0.001)
        assert proc.poll() is None, "the gateway died on its own before the kill"  # else nothing below is tested
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for f in futures:
            with contextlib.suppress(Exception):
                f.result()
    before = store.ids()
    for sid in before:  # whatever is there is whole: every call of the session, readable
        rows = store.sessions([sid]).to_pylist()
        assert sorted(r["call_index"] for r in rows) == list(range(len(rows)))
    proc = start_gateway(tiny_model, tmp_path, port)
    try:
        call("run-11", "second")  # an open session goes on after the restart
        for key in keys:
            httpx.post(f"{url}/sessions/{key}/reward", json={"reward": 1.0}, timeout=30).raise_for_status()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    table = store.sessions().to_pylist()
    by_key: dict[str, list] = {}
    for r in table:
        by_key.setdefault(r["session_key"], []).append(r)
    assert sorted(by_key) == sorted(keys)  # each session once: no key twice, none lost
    assert len({r["session_id"] for r in table}) == len(keys) and set(before) <= {
        r["session_id"] for r in table
    }
    assert len(by_key["run-0"]) == 2 and len(by_key["run-11"]) == 2
    assert all(r["reward"] == 1.0 for r in table)
    assert not list((tmp_path / "spool").glob("*.jsonl"))
    assert not [
        p for p in (tmp_path / "lake" / "gateway" / "sessions").iterdir() if not p.name.endswith(".parquet")
    ]
