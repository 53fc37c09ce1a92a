"""The OpenAI-compatible gateway (flywheel/gateway/) recording sessions, driven by the real
`openai` SDK against a real server: the tiny random-weight model on the `hf` engine for
token-exactness, and a scripted engine (real token ids of scripted replies) for a
tool-calling agent loop, which a random model never writes. Sessions: how calls group into
them, how rewards and idle timeouts close them, and what the scrubber leaves. What the
gateway refuses is in test_gateway_limits.py; kills and recovery in test_gateway_crash.py."""

from __future__ import annotations

import json
import math
import time

import httpx
import openai
import pytest

from flywheel.gateway.trajectories import session_trajectories, usable_for_rl

from .gateway_fixtures import TOOLS, ScriptedEngine, make_gateway, rows_by_call, serving


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
