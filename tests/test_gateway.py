"""The OpenAI-compatible gateway (flywheel/gateway/), driven by the real `openai` SDK against
a real server: the tiny random-weight model on the `hf` engine for token-exactness, and a
scripted engine (real token ids of scripted replies) for a tool-calling agent loop, which a
random model never writes. The kill -9 test runs `flywheel gateway serve` in a process of
its own and kills it mid-session."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import uvicorn

from flywheel.config import EngineConfig
from flywheel.config.gateway import GatewayConfig
from flywheel.gateway.app import build_app
from flywheel.gateway.service import Gateway
from flywheel.gateway.trajectories import session_trajectories, usable_for_rl
from flywheel.policy.engines import make_engine
from flywheel.policy.engines.base import Engine, Sample
from flywheel.production.scrub import Scrubber
from flywheel.storage.lake import Lake
from flywheel.storage.seaweed import free_port
from flywheel.storage.sessions import SessionStore

TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b",
          "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]  # fmt: skip


@pytest.fixture(scope="module")
def hf(tiny_model):
    engine = make_engine(tiny_model, EngineConfig(backend="hf"))
    yield engine
    engine.close()


class ScriptedEngine(Engine):
    """Replies chosen from the prompt's text, as real token ids: a tool call first, an answer
    once a tool result is in the prompt."""

    name = "scripted"

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompts, spec):
        out = []
        for prompt in prompts:
            last_turn = self.tok.decode(prompt).rsplit("<|im_start|>", 2)[-2]
            text = ("The sum is 42." if last_turn.startswith("tool") else
                    'Let me add.<tool_call>{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>')  # fmt: skip
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Sample(text, ids, [-0.25] * len(ids), "stop") for _ in range(spec.n)])
        return out

    def load_weights(self, hf_dir):
        pass

    def prompt_logprobs(self, sequences, prompt_lens):
        return [[0.0] * (len(s) - n) for s, n in zip(sequences, prompt_lens)]


def make_gateway(engine, tokenizer, tmp_path, **config) -> Gateway:
    store = SessionStore(Lake(str(tmp_path / "lake")))
    return Gateway(engine, tokenizer, store, GatewayConfig(**config), spool_dir=tmp_path / "spool",
                   max_model_len=1024, policy="tiny@v0", scrubber=Scrubber())  # fmt: skip


@contextlib.contextmanager
def serving(gw: Gateway):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(gw), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        gw.close_engine()


def rows_by_call(store: SessionStore, session_id: str) -> dict[tuple[int, int], dict]:
    return {(r["call_index"], r["choice_index"]): r for r in store.sessions([session_id]).to_pylist()}


def test_the_lake_holds_the_ids_of_exactly_what_the_client_got(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path)
    tok = hf.tokenizer
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        assert [m.id for m in client.models.list()] == ["flywheel"]
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
        raw = client.chat.completions.with_raw_response.create(model="flywheel", messages=messages, n=2,
                                                               max_tokens=12, logprobs=True, temperature=1.0)  # fmt: skip
        first, sid = raw.parse(), raw.headers["x-flywheel-session"]
        messages += [
            first.choices[1].message.model_dump(exclude_none=True),
            {"role": "user", "content": "Again."},
        ]
        chunks = list(client.chat.completions.create(model="flywheel", messages=messages, max_tokens=10, stream=True,
                                                     stream_options={"include_usage": True}, stop=["\n\n"]))  # fmt: skip
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].usage.completion_tokens >= 1
        assert httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 0.5}).json()["status"] == "written"
    rows = rows_by_call(gw.store, sid)
    assert set(rows) == {(0, 0), (0, 1), (1, 0)}  # the streamed call continued choice 1: same session
    for j, choice in enumerate(first.choices):
        row = rows[(0, j)]
        assert tok.decode(row["completion_token_ids"], skip_special_tokens=True) == choice.message.content
        assert (
            row["completion_text"] == choice.message.content
            and row["response"]["content"] == choice.message.content
        )
        assert [lp.logprob for lp in choice.logprobs.content] == pytest.approx(
            row["completion_logprobs"], abs=1e-6
        )
        assert first.usage.prompt_tokens == len(row["prompt_token_ids"])
    second = rows[(1, 0)]
    assert tok.decode(second["completion_token_ids"], skip_special_tokens=True) == streamed
    assert (second["parent_call"], second["parent_choice"], second["continued"]) == (0, 1, True)
    # the continued prompt is the parent's own sequence, then the new messages' ids
    assert second["prompt_token_ids"][: len(rows[(0, 1)]["prompt_token_ids"]) + len(rows[(0, 1)]["completion_token_ids"])] \
        == rows[(0, 1)]["prompt_token_ids"] + rows[(0, 1)]["completion_token_ids"]  # fmt: skip
    assert tok.decode(second["prompt_token_ids"]).endswith("Again.<|im_end|>\n<|im_start|>assistant\n")
    assert all(r["reward"] == 0.5 and r["labelled"] and not r["scrubbed"] for r in rows.values())


def test_a_tool_calling_agent_loop_is_one_session_with_its_calls_in_the_lake(hf, tmp_path):
    gw = make_gateway(ScriptedEngine(hf.tokenizer), hf.tokenizer, tmp_path)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        messages, replies = [{"role": "user", "content": "What is 40 + 2?"}], []
        while True:  # the agent: a loop of a few lines, as users write them
            reply = client.chat.completions.create(model="any-name", messages=messages, tools=TOOLS).choices[
                0
            ]
            replies.append(reply)
            messages.append(reply.message)
            if not reply.message.tool_calls:
                break
            for call in reply.message.tool_calls:
                args = json.loads(call.function.arguments)
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": str(args["a"] + args["b"])}
                )
        assert [r.finish_reason for r in replies] == ["tool_calls", "stop"]
        call = replies[0].message.tool_calls[0]
        assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 40, "b": 2})
        assert replies[0].message.content == "Let me add." and replies[1].message.content == "The sum is 42."
        [sid] = list(gw.book.open)
        assert httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1.0}).status_code == 200
    rows = rows_by_call(gw.store, sid)
    assert set(rows) == {(0, 0), (1, 0)}
    first, second = rows[(0, 0)], rows[(1, 0)]
    assert (
        hf.tokenizer.decode(first["completion_token_ids"], skip_special_tokens=True)
        == first["completion_text"]
    )
    assert first["response"]["tool_calls"][0]["id"] == call.id and first["finish_reason"] == "tool_calls"
    assert (second["parent_call"], second["continued"]) == (0, True)
    prompt = hf.tokenizer.decode(second["prompt_token_ids"])
    assert "<tool_call>" in prompt and "<|im_start|>tool\n42<|im_end|>" in prompt  # the model's own call text
    assert "You can call these tools" in prompt  # the template takes no tools=: they are in the system prompt
    [traj] = session_trajectories(gw.store.sessions([sid]))  # the session as one multi-turn trajectory
    assert traj["calls"] == [0, 1] and traj["prompt_token_ids"] == first["prompt_token_ids"]
    ids, lps = traj["completion_token_ids"], traj["completion_logprobs"]
    sampled = [i for i, lp in enumerate(lps) if not math.isnan(lp)]
    assert len(sampled) == len(first["completion_token_ids"]) + len(second["completion_token_ids"])
    assert hf.tokenizer.decode([ids[i] for i in sampled], skip_special_tokens=True) == (
        first["completion_text"] + second["completion_text"]
    )
    assert usable_for_rl(traj, "tiny", 0, 1) == (True, "")
    assert usable_for_rl(traj, "tiny", 3, 1)[1].startswith("stale")


def test_sessions_group_by_header_by_parameter_and_by_prefix(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")

        def ask(messages, **kw):
            raw = client.chat.completions.with_raw_response.create(model="flywheel", messages=messages,
                                                                   max_tokens=4, **kw)  # fmt: skip
            return raw.parse(), raw.headers["x-flywheel-session"]

        header = {"extra_headers": {"X-Flywheel-Session": "agent-run-1"}}
        _, a1 = ask([{"role": "user", "content": "one"}], **header)
        _, a2 = ask([{"role": "user", "content": "something else"}], **header)
        _, u1 = ask([{"role": "user", "content": "one"}], user="alice")
        _, u2 = ask([{"role": "user", "content": "two"}], user="alice")
        _, m1 = ask([{"role": "user", "content": "one"}], metadata={"session_id": "m-1"})
        first, p1 = ask([{"role": "user", "content": "one"}])
        _, p2 = ask([{"role": "user", "content": "one"}])
        follow = [{"role": "user", "content": "one"}, {"role": "assistant", "content": first.choices[0].message.content},
                  {"role": "user", "content": "and then?"}]  # fmt: skip
        _, p3 = ask(follow)
        assert a1 == a2 and u1 == u2 and p1 == p3
        assert len({a1, u1, m1, p1, p2}) == 5
        status = httpx.get(f"{url}/sessions/agent-run-1").json()
        assert status == {
            "session_id": a1,
            "status": "open",
            "calls": 2,
            "grouped_by": "header",
            "key": "agent-run-1",
        }
        assert httpx.post(f"{url}/sessions/agent-run-1/reward", json={"reward": 1}).json()["session_id"] == a1
        _, a3 = ask(
            [{"role": "user", "content": "one"}], **header
        )  # the rewarded session is closed: a new one
        assert a3 != a1


def test_rewards_close_sessions_once_and_say_what_is_wrong(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        sids = [client.chat.completions.with_raw_response.create(
            model="flywheel", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=3).headers["x-flywheel-session"]
            for i in range(3)]  # fmt: skip
        assert httpx.post(f"{url}/sessions/{sids[0]}/reward", json={"reward": "high"}).status_code == 400
        assert httpx.post(f"{url}/sessions/{sids[0]}/reward", json={"score": 1}).status_code == 400
        assert httpx.post(f"{url}/sessions/{sids[0]}/reward", json={"reward": 1e300}).status_code == 400
        assert httpx.post(f"{url}/sessions/nope-nope-nope/reward", json={"reward": 1}).status_code == 404
        ok = {"reward": 0.25, "components": {"tests": 1, "style": -0.5}, "note": "ok"}
        assert httpx.post(f"{url}/sessions/{sids[0]}/reward", json=ok).json()["status"] == "written"
        again = httpx.post(f"{url}/sessions/{sids[0]}/reward", json=ok).json()  # a retry: nothing doubles
        assert again["status"] == "written" and "before" in again["note"]
        assert httpx.post(f"{url}/sessions/{sids[1]}/reward", json={"reward": None}).status_code == 200
    table = gw.store.sessions().to_pylist()
    assert sorted(r["session_id"] for r in table) == sorted(sids[:2])
    by = {r["session_id"]: r for r in table}
    assert by[sids[0]]["labelled"] and json.loads(by[sids[0]]["reward_json"])["components"] == {
        "tests": 1.0,
        "style": -0.5,
    }
    assert (
        not by[sids[1]]["labelled"]
        and by[sids[1]]["reward"] is None
        and by[sids[1]]["closed_reason"] == "unlabelled"
    )


def test_idle_sessions_are_written_unlabelled(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path, session_timeout_s=0.3)
    with serving(gw) as url:
        raw = openai.OpenAI(base_url=url, api_key="unused").chat.completions.with_raw_response.create(
            model="flywheel", messages=[{"role": "user", "content": "hi"}], max_tokens=3)  # fmt: skip
        sid = raw.headers["x-flywheel-session"]
        deadline = time.time() + 10
        while not gw.store.has(sid) and time.time() < deadline:
            time.sleep(0.1)
    [row] = gw.store.sessions([sid]).to_pylist()
    assert (row["closed_reason"], row["labelled"], row["reward"]) == ("timeout", False, None)
    assert not list((tmp_path / "spool").glob("*.jsonl"))


def test_a_session_the_scrubber_changed_keeps_no_token_ids(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        secret = "my key is AKIAIOSFODNN7EXAMPLE and mail me at jane.doe@example.com"
        raw = client.chat.completions.with_raw_response.create(
            model="flywheel", messages=[{"role": "user", "content": secret}], max_tokens=3)  # fmt: skip
        sid = raw.headers["x-flywheel-session"]
        httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1})
    [row] = gw.store.sessions([sid]).to_pylist()
    assert row["scrubbed"] and row["prompt_token_ids"] == [] and row["completion_token_ids"] == []
    assert "AKIA" not in json.dumps(row, default=str) and "jane.doe" not in json.dumps(row, default=str)
    assert "[REDACTED:" in row["messages"][0]["content"]


def test_what_is_not_served_is_a_clear_4xx(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path, requests_per_minute=30, max_request_bytes=4096)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        base = {"model": "flywheel", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        cases = [({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
                 ({"response_format": {"type": "json_object"}}, "response_format"),
                 ({"logprobs": True, "top_logprobs": 3}, "top_logprobs"),
                 ({"frequency_penalty": 0.5}, "frequency_penalty"),
                 ({"extra_body": {"guided_json": {}}}, "guided_json"),
                 ({"functions": [{"name": "f"}]}, "functions"),
                 ({"max_tokens": 5000}, "messages")]  # fmt: skip
        for extra, param in cases:
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(**{**base, **extra})
            assert err.value.body["param"] == param, err.value.body
        image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
        with pytest.raises(openai.BadRequestError, match="only text content"):
            client.chat.completions.create(**{**base, "messages": image})
        big = httpx.post(
            f"{url}/chat/completions", json={**base, "messages": [{"role": "user", "content": "y" * 5000}]}
        )
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
        with pytest.raises(openai.RateLimitError):  # 30 a minute: the calls above count too
            for _ in range(40):
                client.chat.completions.create(**base)


def test_keys_are_required_off_loopback_and_checked_when_set(hf, tmp_path):
    with pytest.raises(ValueError, match="API keys"):
        Gateway(hf, hf.tokenizer, SessionStore(Lake(str(tmp_path / "lake"))), GatewayConfig(host="0.0.0.0"),
                spool_dir=tmp_path / "spool", max_model_len=1024)  # fmt: skip
    gw = Gateway(hf, hf.tokenizer, SessionStore(Lake(str(tmp_path / "lake"))), GatewayConfig(),
                 spool_dir=tmp_path / "spool", max_model_len=1024, api_keys=["k-123"])  # fmt: skip
    with serving(gw) as url:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        assert [m.id for m in openai.OpenAI(base_url=url, api_key="k-123").models.list()] == ["flywheel"]


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
