"""Online mode end to end (issue 45, item 4): a run's policy v1 is deployed, `flywheel
gateway serve --version deployed` serves it as a process of its own, a tool-calling agent
loop of a few lines on the real `openai` SDK produces live sessions, rewards reach them
(POST /v1/sessions/{id}/reward, and a workload's reward function in the sandbox), and then
`flywheel run` (the CLI: the tiny model on the `hf` engine, the DeepSpeed trainer, bwrap)
runs two cycles with `gateway.online.enabled`. The first cycle's update trains on exactly
those sessions, token for token as the lake has them; the second takes none again; the
cycle lines and cycles.jsonl say so.

The cycles' own tasks are a task file whose rows a random model never answers (`exact`),
so every generated group has one reward and is dropped (`drop_zero_variance_groups`): the
update's samples are the live sessions alone, and its counts are theirs.

The deploy is recorded with `Deployments.add`, as `flywheel deploy` records it, without
its gate (no evaluations to compare) and its weight push (no serving vLLM): those are
tests/test_production_loop.py's. v1 is published as `flywheel sft` into a new run
publishes it (cycle -1), from the tiny model's weights, so that cycle 0 starts at v1.

Marked `slow` (60-95 s: two `flywheel run` processes, each starting the engine and DeepSpeed),
so it is not in the CI set. There, tests/test_gateway_online.py covers its parts: the live
stage and the update stage bodies (`live.fn`, `update.fn`) claiming and training each live
session once, stale ones kept, a killed cycle taking the same claim
(test_cycles_train_on_live_sessions_once_...); labelling by a workload's verifier in the
sandbox and the failed session's replay trace (test_a_live_session_is_rewarded_by_...);
ingested feedback as a label (test_feedback_in_the_production_logs_...); a reward function
and the judge as a label (test_a_reward_function_and_the_judge_label_...); `flywheel gateway
serve --version deployed` as a process (test_flywheel_gateway_serve_serves_the_deployed_...).
Only here: the cycle of flows/flywheel.py calling the live stage (with the run's own sandbox
and reward functions), and a `flywheel run` resumed between two claims."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from flywheel.environments.sandbox.bwrap import check_available
from flywheel.gateway.trajectories import session_trajectories
from flywheel.storage.deployments import Deployments
from flywheel.storage.lake import Lake
from flywheel.storage.live_sessions import ClaimStore, LabelStore
from flywheel.storage.policies import PolicyStore
from flywheel.storage.seaweed import free_port
from flywheel.storage.sessions import SessionStore
from flywheel.storage.traces import TraceStore

from .gateway_fixtures import TOOLS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(check_available() is not None, reason="bubblewrap cannot run here"),
]

# A user's reward function (reward.functions), run in the sandbox: it pays 0.75 to a reply
# to a greeting request and nothing to anything else (the cycles' own tasks among them, so
# their groups stay flat).
REWARD_FUNCTIONS = """
def greeted(prompts, completions, **_):
    return [0.75 if "greeting" in str(p) else 0.0 for p in prompts]
"""

CONFIG = """
engine: {backend: hf, max_model_len: 1024}
sampler: {tasks_per_cycle: 2, levels: [1], domains: ["file:TASKS"]}
generation: {k: 2, max_tokens: 8}
eval: {before_and_after: false}
tracking: {backends: []}
trainer: {save_checkpoints: false}
sandbox: {concurrency: 2}
reward: {functions: [live_rewards_fn:greeted]}
workloads: {greetings: {verifier: none}}
gateway: {online: {enabled: true, max_lag: 1}}
"""


def agent(client, question: str) -> tuple[str, list[str]]:
    """A tool-calling loop of a few lines; a random model calls no tool, so it is asked twice.
    Its session id and the texts it received."""
    messages, received = [{"role": "user", "content": question}], []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=6, temperature=1.0
        )
        reply = raw.parse().choices[0].message
        received.append(reply.content or "")
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})
        if not reply.tool_calls:
            messages.append({"role": "user", "content": "Check it, then answer again."})
    return raw.headers["x-flywheel-session"], received


def single_call(client, question: str, workload: str) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model="policy", messages=[{"role": "user", "content": question}], max_tokens=6,
        extra_headers={"X-Flywheel-Workload": workload},
    )  # fmt: skip
    return raw.headers["x-flywheel-session"]


def start_gateway(cmd: list[str], env: dict, log) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log, "ab") as err:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([*cmd, "--port", str(port)], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 180
    while True:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"the gateway did not start:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)


@pytest.mark.slow  # 60-95 s; the module docstring says what covers its parts in the CI set
def test_flywheel_run_trains_once_on_the_live_sessions_of_the_deployed_policy(tiny_model, tmp_path):
    runs, run = tmp_path / "runs", "live"
    lake = Lake(str(runs / run / "lake"))
    PolicyStore(lake, run, tmp_path / "setup-cache").publish(
        -1, 1, shutil.copytree(tiny_model, tmp_path / "v1")
    )
    Deployments(lake).add(run, 1, ["http://serving"], "deployed", "", [], (run, 0))
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"t{i}", "prompt": f"What is {i} + 1000? Answer with the number.", "answer": str(i + 1000),
             "verifier": "exact"} for i in range(2)]  # fmt: skip
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "online.yaml"
    config.write_text(CONFIG.replace("TASKS", str(tasks)))
    fns = tmp_path / "fns"
    fns.mkdir()
    (fns / "live_rewards_fn.py").write_text(REWARD_FUNCTIONS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(fns), os.environ.get("PYTHONPATH")])),
    }
    common = ["--run-id", run, "--runs-dir", str(runs), "--config", str(config)]
    cli = [sys.executable, "-m", "flywheel.cli"]
    gateway = [*cli, "gateway", "serve", *common, "--version", "deployed"]

    def flywheel_run(cycles: int) -> str:
        cmd = [*cli, "run", "--model", tiny_model, "--cycles", str(cycles), *common]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
        print("\n".join(line for line in out.stdout.splitlines() if "live sessions" in line))
        return out.stdout

    t0 = time.monotonic()
    proc, url = start_gateway(gateway, env, tmp_path / "gateway.log")
    try:  # the gateway serves the deployed v1 all along, while the run trains v2 and v3
        assert httpx.get(f"{url}/models").json()["data"][0]["policy"] == f"{run}@v1"
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        good, good_text = agent(client, "What is 40 + 2? Use the tool.")
        bad, bad_text = agent(client, "What is 40 + 1? Use the tool.")
        greet = single_call(client, "Write a greeting for the team.", "greetings")  # its workload rewards it
        lost = single_call(client, "Say anything.", "unscored")  # a workload the config does not name
        for sid, reward in ((good, 1.0), (bad, 0.0), (greet, None), (lost, None)):
            r = httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": reward}, timeout=30)
            assert r.json()["status"] == "written", r.text
        t_sessions = time.monotonic() - t0
        t0 = time.monotonic()
        out_first = flywheel_run(1)  # cycle 0
        late, _ = agent(client, "What is 7 + 5? Use the tool.")  # served while the trainer is at v2
        httpx.post(f"{url}/sessions/{late}/reward", json={"reward": 1.0}, timeout=30).raise_for_status()
        out_second = flywheel_run(2)  # the same run resumed: cycle 1
        t_run = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"sessions through the gateway process: {t_sessions:.0f}s; two online cycles (two runs): {t_run:.0f}s"
    )

    store = SessionStore(lake)
    assert sorted(store.ids()) == sorted([good, bad, greet, lost, late])
    chains = {c["session_id"]: c for c in session_trajectories(store.sessions())}  # one chain each here
    tok = AutoTokenizer.from_pretrained(tiny_model)
    for sid, received in ((good, good_text), (bad, bad_text)):  # the lake's tokens are what the agent got
        calls = sorted(store.sessions([sid]).to_pylist(), key=lambda r: r["call_index"])
        assert [tok.decode(c["completion_token_ids"], skip_special_tokens=True) for c in calls] == received
        assert calls[1]["parent_call"] == 0 and calls[1]["continued"]  # one chain of two calls

    def sampled(sids) -> int:  # the tokens the policy sampled in the sessions' chains
        n = sum(sum(not math.isnan(lp) for lp in chains[s]["completion_logprobs"]) for s in sids)
        assert n == sum(len(r["completion_token_ids"]) for r in store.sessions(sids).to_pylist())
        return n

    # the workload's reward function labelled the session nobody rewarded; the unknown workload's waits
    labels = LabelStore(lake).all()
    assert set(labels) == {greet}
    assert labels[greet]["source"] == "workload" and labels[greet]["reward"] == pytest.approx(0.75)
    [fn] = [c for c in labels[greet]["detail"]["components"] if c["name"] == "live_rewards_fn:greeted"]
    assert fn["value"] == pytest.approx(0.75)

    lines = [json.loads(line) for line in (runs / run / "cycles.jsonl").read_text().splitlines()]
    assert [c["cycle"] for c in lines] == [0, 1] and [c["policy_version"] for c in lines] == [2, 3]
    assert all("live" in c["stage_s"] for c in lines)
    first, second = lines[0]["update"], lines[1]["update"]
    used = [good, bad, greet]
    claims = ClaimStore(lake, run).all()
    assert sorted(claims) == [0, 1]
    assert sorted(e["id"] for e in claims[0]["sessions"]) == sorted(used)
    assert [e["id"] for e in claims[1]["sessions"]] == [late]  # none of cycle 0's again; `lost` never
    assert {e["use"] for c in claims.values() for e in c["sessions"]} == {"rl"}
    # advantages against each workload's baseline: the agent's two (rewards 1 and 0) are +-1; the
    # greeting is alone in its workload (0); `late` is measured against all three of "default"'s
    advantages = {e["id"]: e["advantage"] for c in claims.values() for e in c["sessions"]}
    assert advantages == pytest.approx({good: 1.0, bad: -1.0, greet: 0.0, late: math.sqrt(0.5)}, abs=1e-4)
    # what each update trained on: its claimed sessions, every token of their chains, no generated sample
    for update, sids in ((first, used), (second, [late])):
        assert update["train_samples"] == 0 and update["zero_variance_groups"] == update["groups"] > 0
        assert (update["live_sessions"], update["samples"], update["live_tokens"]) == (
            len(sids),
            len(sids),
            sampled(sids),
        )
        assert update["completion_tokens"] == sum(len(chains[s]["completion_token_ids"]) for s in sids)
    assert (first["live_kept"], first["live_failed"], first["off_policy_samples"]) == (0, 1, 0)
    assert (second["live_kept"], second["live_failed"], second["off_policy_samples"]) == (0, 0, 1)  # v1 at v2
    assert second["loss"] < 0  # its one sample, of positive advantage, is what the step minimised
    # the failed one (reward 0 < negative_below) is a production trace of its workload, to replay
    [trace] = TraceStore(lake).traces().to_pylist()
    assert json.loads(trace["feedback_json"])["session"] == bad and trace["rating"] == 0.0
    # and the cycle lines say so
    assert (
        f"live sessions (update of cycle 0): 3 trained on ({sampled(used)} sampled tokens), 0 kept"
        in out_first
    )
    assert (
        f"live sessions (update of cycle 1): 1 trained on ({sampled([late])} sampled tokens), 0 kept"
        in out_second
    )
