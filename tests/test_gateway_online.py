"""Online mode (flywheel/gateway/online.py, tasks/live.py): live sessions of a real gateway,
driven by the real `openai` SDK, rewarded after they were written (by their workload's
verifier in the sandbox, by ingested feedback, by a reward function in the sandbox and the
judge) and trained on by the update stage with their recorded logprobs, each session at
most once.

The tiny random-weight model (`hf`) serves the sessions whose text does not matter; the
scripted engine of gateway_fixtures.py (real token ids of scripted replies) serves the
agent loop whose final answer a verifier checks. The update is the real stage body
(`update.fn`) on the real plain-torch trainer, which keeps the samples it was given."""

from __future__ import annotations

import json
import math
import time
from types import SimpleNamespace

import httpx
import openai
import pytest

from flywheel.config import FlywheelConfig, IngestConfig, TrainerConfig
from flywheel.config.gateway import OnlineConfig
from flywheel.environments import reward_functions as rf
from flywheel.environments.judge import make_judge
from flywheel.environments.sandbox import make_sandbox
from flywheel.environments.sources.task_file import FileTasks
from flywheel.environments.sources.traces import TraceSource, TraceTasks
from flywheel.flows.ingest import ingest_file
from flywheel.gateway import online
from flywheel.policy.engines.base import Sample
from flywheel.policy.plain_trainer import PlainTrainer
from flywheel.reports.results import CycleSummary
from flywheel.storage.live_sessions import ClaimStore, LabelStore
from flywheel.storage.policies import PolicyStore
from flywheel.storage.traces import TraceStore
from flywheel.tasks.live import label_sessions, live
from flywheel.tasks.update import update

from .gateway_fixtures import TOOLS, ScriptedEngine, make_gateway, rows_by_call, serving


def agent(client, question: str, answer: str) -> str:
    """A tool-calling loop of a few lines; its calls carry the expected answer as metadata."""
    messages = [{"role": "user", "content": question}]
    while True:
        raw = client.chat.completions.with_raw_response.create(
            model="m",
            messages=messages,
            tools=TOOLS,
            metadata={"answer": answer},
            extra_headers={"X-Flywheel-Workload": "arith"},
        )
        reply = raw.parse().choices[0].message
        messages.append(reply)
        if not reply.tool_calls:
            return raw.headers["x-flywheel-session"]
        for call in reply.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(args["a"] + args["b"])})


def test_a_live_session_is_rewarded_by_its_workloads_verifier_and_a_failed_one_goes_to_replay(hf, tmp_path):
    gw = make_gateway(ScriptedEngine(hf.tokenizer), hf.tokenizer, tmp_path)
    gw.policy = "run@v0"
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        right = agent(client, "What is 40 + 2?", "42")
        wrong = agent(client, "What is 40 + 1?", "41")  # the scripted model says 42 again
        for sid in (right, wrong):  # the agent is done; nobody scores it now
            assert (
                httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": None}).json()["status"]
                == "written"
            )
    before = {sid: gw.store.lake.fs.get_file_info(gw.store.path(sid)).mtime_ns for sid in (right, wrong)}
    lake = gw.store.lake
    config = FlywheelConfig(run_id="run", workloads={"arith": {"verifier": "math"}})
    sandbox = make_sandbox(config.sandbox.model_copy(update={"concurrency": 1}), (FileTasks.sandbox_warmup,))
    try:
        counts = label_sessions(lake, config, sandbox, [], None)
        assert label_sessions(lake, config, sandbox, [], None) == {}  # labelled once: nothing left to label
    finally:
        sandbox.close()
    assert counts["workload"] == 2
    labels = LabelStore(lake).all()
    assert (labels[right]["reward"], labels[right]["detail"]["verdict"], labels[right]["source"]) == (
        1.0,
        "pass",
        "workload",
    )
    assert (labels[wrong]["reward"], labels[wrong]["detail"]["verdict"]) == (0.0, "fail")
    # the sessions themselves are as written: still unlabelled in their own rows, files untouched
    assert all(not r["labelled"] for sid in (right, wrong) for r in rows_by_call(gw.store, sid).values())
    assert before == {sid: lake.fs.get_file_info(gw.store.path(sid)).mtime_ns for sid in (right, wrong)}
    record = online.claim(lake, "run", 0, 0, OnlineConfig(), {"arith": {"negative_below": 0.5}})
    assert {(e["id"], e["use"], e["failed"]) for e in record["sessions"]} == {
        (right, "rl", False),
        (wrong, "rl", True),
    }
    # the failed one is a production trace of its workload, rated with its reward: a logged failure to replay
    [trace] = TraceStore(lake).traces("arith").to_pylist()
    assert (trace["rating"], trace["corrected"], trace["messages"][0]["content"]) == (
        0.0,
        "41",
        "What is 40 + 1?",
    )
    source = TraceSource(lake.root, None, "us-east-1", json.dumps({"arith": {"verifier": "math"}}))
    [failure] = TraceTasks("arith", source).logged_failures("train") + TraceTasks(
        "arith", source
    ).logged_failures("eval")
    assert failure.prompt[-1]["content"] == "What is 40 + 1?"


def test_feedback_in_the_production_logs_labels_a_session_written_unlabelled(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path, session_timeout_s=0.2)
    gw.policy = "run@v0"
    messages = [{"role": "user", "content": "Say hello."}]
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        reply = client.chat.completions.create(
            model="m",
            messages=messages,
            max_tokens=6,
            extra_headers={"X-Flywheel-Session": "conv-7", "X-Flywheel-Workload": "chat"},
        )
        deadline = time.time() + 10
        while gw.book.open and time.time() < deadline:  # nobody rewards it: the timeout writes it
            time.sleep(0.05)
    [sid] = gw.store.ids()
    assert all(
        r["closed_reason"] == "timeout" and not r["labelled"] for r in rows_by_call(gw.store, sid).values()
    )
    lake, config = gw.store.lake, FlywheelConfig(run_id="run")
    assert label_sessions(lake, config, None, [], None) == {}
    assert online.claim(lake, "run", 0, 0, OnlineConfig(), {})["sessions"] == []  # unlabelled: kept, waiting
    logs = tmp_path / "feedback.jsonl"
    records = [
        {"workload_id": "chat", "request": {"messages": messages, "metadata": {"session_id": "conv-7"}},
         "response": {"role": "assistant", "content": reply.choices[0].message.content}, "feedback": {"rating": "up"}},
        {"workload_id": "chat", "request": {"messages": messages},
         "response": {"role": "assistant", "content": "hi"}, "feedback": {"rating": "down", "session_id": "nobody-we-know"}},
    ]  # fmt: skip
    logs.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert ingest_file(TraceStore(lake), str(logs), IngestConfig()).new == 2
    counts = label_sessions(lake, config, None, [], None)
    assert (counts["feedback"], counts["feedback_unknown"]) == (1, 1)
    label = LabelStore(lake).all()[sid]
    assert (label["reward"], label["source"], label["detail"]["rating"]) == (1.0, "feedback", 1.0)
    [entry] = online.claim(lake, "run", 1, 0, OnlineConfig(), {})["sessions"]
    assert (entry["id"], entry["reward"], entry["source"], entry["use"]) == (sid, 1.0, "feedback", "rl")


GREETED = """
def greeted(prompts, completions, **_):
    return [0.75 if "greeting" in str(p) else 0.0 for p in prompts]
"""


class GreetingEngine(ScriptedEngine):
    """Greets whoever asks; asked as the judge (the grader's prompt), gives 6 out of 10."""

    def generate(self, prompts, spec):
        out = []
        for prompt in prompts:
            grading = "strict grader" in self.tok.decode(prompt)
            text = (
                '{"matches_reference": null, "meets_rubric": true, "score": 6}' if grading else "Hello, team!"
            )
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Sample(text, ids, [-0.25] * len(ids), "stop") for _ in range(spec.n)])
        return out


def test_a_reward_function_and_the_judge_label_a_live_session_of_a_workload_without_a_verifier(
    hf, tmp_path, monkeypatch
):
    """A `none` workload's live session is scored as the score stage scores a rollout of it:
    `reward.functions` in the sandbox plus `reward.judge` (on the run's engine, scripted to a
    verdict); a session of a workload the config does not name waits, unlabelled."""
    (tmp_path / "live_fns.py").write_text(GREETED)
    monkeypatch.syspath_prepend(
        str(tmp_path)
    )  # where `reward.functions` are found (the working dir, sys.path)
    engine = GreetingEngine(hf.tokenizer)
    gw = make_gateway(engine, hf.tokenizer, tmp_path)
    gw.policy = "run@v0"
    sids = {}
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")
        for workload in ("greetings", "unnamed"):
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "Write a greeting for the team."}],
                extra_headers={"X-Flywheel-Workload": workload},
            )  # fmt: skip
            sids[workload] = raw.headers["x-flywheel-session"]
            assert httpx.post(f"{url}/sessions/{sids[workload]}/reward", json={"reward": None}).is_success
    lake = gw.store.lake
    config = FlywheelConfig(run_id="run", workloads={"greetings": {"verifier": "none"}},
                            reward={"functions": ["live_fns:greeted"],
                                    "judge": {"rubric": "A warm greeting.", "backend": "engine", "weight": 0.5}})  # fmt: skip
    functions = rf.load([f.spec() for f in config.reward.functions])
    judge = make_judge(config.reward.judge, lake, lambda: engine, lambda: hf.tokenizer)
    sandbox = make_sandbox(config.sandbox.model_copy(update={"concurrency": 1}), (FileTasks.sandbox_warmup,))
    try:
        assert label_sessions(lake, config, sandbox, functions, judge) == {"workload": 1}
    finally:
        sandbox.close()
    labels = LabelStore(lake).all()
    assert set(labels) == {sids["greetings"]}
    label = labels[sids["greetings"]]
    assert (label["source"], label["detail"]["verdict"]) == ("workload", "pass")
    assert label["reward"] == pytest.approx(
        0.75 + 0.5 * 0.6
    )  # the function's, plus the judge's by its weight
    values = {c["name"]: c["value"] for c in label["detail"]["components"]}
    assert values == {"verifier": None, "live_fns:greeted": 0.75, "judge": pytest.approx(0.6)}
    [entry] = online.claim(lake, "run", 0, 0, OnlineConfig(), {})["sessions"]
    assert (entry["id"], entry["source"], entry["use"]) == (sids["greetings"], "workload", "rl")


class KeepingTrainer(PlainTrainer):
    """The real trainer; it keeps the samples of each step."""

    def step(self, samples):
        self.seen.append(samples)
        return super().step(samples)


@pytest.fixture(scope="module")
def trainer(tiny_model):
    t = KeepingTrainer(tiny_model, TrainerConfig(save_checkpoints=False), device="cpu")
    t.seen = []
    return t


def test_cycles_train_on_live_sessions_once_stale_ones_kept_and_a_killed_cycle_takes_the_same(
    hf, tiny_model, trainer, tmp_path
):
    gw = make_gateway(hf, hf.tokenizer, tmp_path)
    lake = gw.store.lake
    config = FlywheelConfig(run_id="run", gateway={"online": {"enabled": True, "max_lag": 1}},
                            trainer={"save_checkpoints": False})  # fmt: skip
    policies = PolicyStore(lake, "run", tmp_path / "cache")
    staging = tmp_path / "staging"
    rt = SimpleNamespace(
        config=config, lake=lake, run_id="run", trainer=trainer, teacher=None, sandbox=None, reward_functions=[],
        judge=None, staging_dir=lambda name: staging / name, record_update=policies.publish,
    )  # fmt: skip

    def cycle(n: int, kill_after_live: bool = False) -> tuple[dict, list | None]:
        """The cycle's two live-mode stages as run_cycle runs them (flows/flywheel.py)."""
        rt.policy_version = policies.manifest["version"]
        stats = live.fn(rt, n)
        if kill_after_live:
            return stats, None
        before = len(trainer.seen)
        result = update.fn(rt, n)
        return {**stats, **result}, trainer.seen[before] if len(trainer.seen) > before else None

    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused")

        def session(reward, key: str):
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": f"Tell me about {key}."}], max_tokens=5,
                temperature=1.0, extra_headers={"X-Flywheel-Session": key},
            )  # fmt: skip
            sid = raw.headers["x-flywheel-session"]
            if reward != "open":
                httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": reward}).raise_for_status()
            return sid

        gw.policy = "run@v0"  # what the deploy put in serving (flywheel gateway serve --version deployed)
        a, b, c = session(1.0, "apples"), session(0.0, "bananas"), session("open", "cherries")
        first, seen = cycle(0)
        used = {a, b}
        assert (first["rl"], first["kept"], first["live_sessions"]) == (2, 0, 2)
        tokens = {sid: rows_by_call(gw.store, sid)[(0, 0)] for sid in used}
        assert sorted(s.completion_ids for s in seen) == sorted(
            t["completion_token_ids"] for t in tokens.values()
        )
        assert sorted(s.prompt_ids for s in seen) == sorted(t["prompt_token_ids"] for t in tokens.values())
        assert first["live_tokens"] == sum(len(t["completion_token_ids"]) for t in tokens.values())
        for s in seen:  # the behaviour logprobs as recorded; advantages from the workload's baseline
            row = next(t for t in tokens.values() if t["completion_token_ids"] == s.completion_ids)
            assert s.old_logprobs == pytest.approx(row["completion_logprobs"], abs=1e-6) and s.policy_lag == 0
            assert math.copysign(1, s.advantage) == (1 if row["reward"] == 1.0 else -1)
            assert abs(s.advantage) == pytest.approx(1.0, abs=1e-4)  # (1 - 0.5) / 0.5
        assert policies.manifest["version"] == 1

        d = session(0.5, "dates")  # the gateway still serves v0: one version behind the trainer now
        second, seen = cycle(1)
        [sample] = seen
        assert (
            sample.completion_ids == rows_by_call(gw.store, d)[(0, 0)]["completion_token_ids"]
        )  # not a, b again
        assert sample.policy_lag == 1 and second["rl"] == 1  # within max_lag: trained, corrected off policy

        httpx.post(
            f"{url}/sessions/{c}/reward", json={"reward": 1.0}
        ).raise_for_status()  # labelled late, of v0
        gw.policy = "run@v2"  # the next deploy
        e = session(1.0, "elderberries")
        killed, _ = cycle(2, kill_after_live=True)  # killed after its claim, before its update
        assert (killed["rl"], killed["kept"]) == (1, 1)
        f = session(0.0, "figs")  # arrives while the cycle is down
        again, seen = cycle(2)  # the re-run: the same claim, the same sessions
        assert again["resumed"] and (again["rl"], again["kept"], again["live_kept"]) == (1, 1, 1)
        assert [s.completion_ids for s in seen] == [rows_by_call(gw.store, e)[(0, 0)]["completion_token_ids"]]
        kept = {x["id"]: x for x in ClaimStore(lake, "run").read(2)["sessions"]}
        assert kept[c]["use"] == "kept" and kept[c]["why"].startswith("stale: policy v0, 2 versions behind")
        assert len(gw.store.sessions([c])) == 1  # kept in the lake for SFT or evaluation
        summary = {k: v for k, v in again.items() if isinstance(v, (int, float, str))}
        line = CycleSummary(run_id="run", cycle=2, policy_version=3, tasks=0, replayed_tasks=0, trajectories=0,
                            mean_reward=0.0, pass_rate=0.0, queued_for_replay=0, stage_s={}, by_domain_level=[],
                            finished_at="", update=summary).line()  # fmt: skip
        assert (
            "live sessions (update of cycle 2): 1 trained on" in line and "1 kept for SFT/eval only" in line
        )
        last, seen = cycle(3)
        assert [s.completion_ids for s in seen] == [rows_by_call(gw.store, f)[(0, 0)]["completion_token_ids"]]
    claims = ClaimStore(lake, "run").all()
    trained = [s["id"] for claim in claims.values() for s in claim["sessions"] if s["use"] == "rl"]
    assert sorted(trained) == sorted(
        [a, b, d, e, f]
    )  # each live session trained on once, the stale one never


def test_the_gateway_serves_the_runs_deployed_version_or_says_why_not(tmp_path):
    from flywheel.cli.errors import UsageProblem
    from flywheel.cli.gateway import deployed_version
    from flywheel.storage.deployments import Deployments
    from flywheel.storage.lake import Lake

    lake = Lake(str(tmp_path / "lake"))
    with pytest.raises(UsageProblem, match="nothing was deployed"):
        deployed_version(lake, "run")
    Deployments(lake).add("run", 3, ["http://a"], "deployed", "", [], ("run", 0))
    Deployments(lake).add(
        "run", 4, ["http://a"], "refused", "worse", [], ("run", 3)
    )  # the gate said no: still v3
    assert deployed_version(lake, "run") == 3
    Deployments(lake).add("other", 1, ["http://a"], "deployed", "", [], ("run", 3))
    with pytest.raises(UsageProblem, match="serving policy is other v1"):
        deployed_version(lake, "run")


def test_flywheel_gateway_serve_serves_the_deployed_version_and_its_sessions_are_the_runs(
    tiny_model, tmp_path
):
    """The command itself: a run whose v1 was deployed, served with --version deployed; a
    session it records is of run@v1, so the run's cycle at v1 trains on it (lag 0)."""
    import shutil
    import subprocess
    import sys

    from flywheel.storage.deployments import Deployments
    from flywheel.storage.lake import Lake
    from flywheel.storage.seaweed import free_port

    lake = Lake(str(tmp_path / "runs" / "run" / "lake"))
    policies = PolicyStore(lake, "run", tmp_path / "cache")
    policies.publish(0, 1, shutil.copytree(tiny_model, tmp_path / "v1"))  # the staged dir is consumed
    Deployments(lake).add("run", 1, ["http://serving"], "deployed", "", [], ("run", 0))
    port = free_port()
    cmd = [sys.executable, "-m", "flywheel.cli", "gateway", "serve", "--run-id", "run", "--runs-dir",
           str(tmp_path / "runs"), "--version", "deployed", "--port", str(port), "--set", "engine.backend=hf"]  # fmt: skip
    log = tmp_path / "gateway.log"
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            try:
                models = httpx.get(f"{url}/models", timeout=1).json()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert models["data"][0]["policy"] == "run@v1"
        raw = openai.OpenAI(base_url=url, api_key="unused").chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "Hi."}], max_tokens=4
        )
        sid = raw.headers["x-flywheel-session"]
        assert httpx.post(f"{url}/sessions/{sid}/reward", json={"reward": 1.0}).json()["status"] == "written"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    [entry] = online.claim(lake, "run", 0, 1, OnlineConfig(), {})["sessions"]
    assert (entry["id"], entry["policy"], entry["use"]) == (sid, "run@v1", "rl")
