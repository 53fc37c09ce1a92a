"""The shipped example agent (examples/agents/calculator_agent.py, the real `openai` SDK)
in offline mode (issue 45): an evaluation with `agent.entry` set runs it once per held-out
task in its bubblewrap sandbox against the stage's gateway, every call greedy whatever
the agent asks for, and the evaluation's pass@1 is over its sessions (tiny random-weight
model on the `hf` engine, a local lake); and its tool loop, driven by a scripted engine
that calls the calculator (a random model calls no tool), is one rewarded trajectory."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from flywheel.config import FlywheelConfig
from flywheel.environments.sandbox.bwrap import check_available
from flywheel.flows.evaluate import eval_tasks, run_evaluation
from flywheel.policy.engines import SamplingSpec
from flywheel.policy.engines.base import Engine, Sample
from flywheel.run.runtime import Runtime
from flywheel.storage.lake import Lake
from flywheel.storage.sessions import SessionStore
from flywheel.tasks.agent_runs import session_id
from flywheel.tasks.generate import generate
from flywheel.tasks.score import score

AGENTS = Path(__file__).resolve().parents[1] / "examples" / "agents"


def load_example():
    spec = importlib.util.spec_from_file_location("calculator_agent", AGENTS / "calculator_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_agents_calculator():
    calculate = load_example().calculate
    assert (
        calculate("76 × 96") == "7296" and calculate("7 / 2") == "3.5" and calculate("-(2 ** 3) % 5") == "2"
    )
    assert calculate("__import__('os')").startswith("error") and calculate("1 / 0").startswith("error")
    assert calculate("9 ** 999").startswith("error")


def write_tasks(tmp_path, rows) -> str:
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"file:{tmp_path / 'tasks.jsonl'}"


def agent_config(tmp_path, tiny_model, domain, **generation) -> FlywheelConfig:
    return FlywheelConfig(
        run_id="agent-eval", runs_dir=str(tmp_path / "runs"), model={"path": tiny_model},
        engine={"backend": "hf", "max_model_len": 1024}, sampler={"domains": [domain], "levels": [1]},
        generation={"max_tokens": 8, **generation}, sandbox={"concurrency": 3}, tracking={"backends": []},
        eval={"suites": []}, agent={"entry": "calculator_agent:run", "path": str(AGENTS), "timeout_s": 60},
    )  # fmt: skip


class CalculatorCaller(Engine):
    """A model that calls the calculator on the question's expression, then answers with
    the tool's result (the tiny random model calls no tool)."""

    name = "scripted"

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompts, spec):
        out = []
        for prompt in prompts:
            turns = self.tok.decode(prompt).split("<|im_start|>")
            last = turns[-2]
            if last.startswith("tool"):
                text = last.removeprefix("tool").replace("<|im_end|>", "").strip()
            else:
                question = last.split("What is ")[-1].split("?")[0]
                text = (
                    '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>'
                    % question
                )
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Sample(text, ids, [-0.5] * len(ids), "stop") for _ in range(spec.n)])
        return out

    def load_weights(self, hf_dir):
        pass

    def prompt_logprobs(self, sequences, prompt_lens):
        return [[0.0] * (len(s) - n) for s, n in zip(sequences, prompt_lens)]


@pytest.mark.skipif(check_available() is not None, reason="bubblewrap cannot run here")
def test_the_example_agent_runs_its_calculator_in_the_sandbox_and_is_rewarded(tmp_path, tiny_model):
    domain = write_tasks(
        tmp_path, [{"id": "mul", "prompt": "What is 76 * 96?", "answer": "7296", "verifier": "exact"}]
    )
    rt = Runtime(agent_config(tmp_path, tiny_model, domain, k=2, max_tokens=64))
    rt._engine = CalculatorCaller(rt.tokenizer)  # the runtime's engine, started by hand
    try:
        [task] = rt.domains[domain].all_tasks("train") + rt.domains[domain].all_tasks("eval")
        ctx = rt.stage_context(0)
        rollouts = generate.fn(rt, ctx, [task])
        records = score.fn(rt, ctx, rollouts)
    finally:
        rt.close()
    assert [(r.num_turns, r.verdict, r.reward) for r in records] == [(2, "pass", 1.0)] * 2
    text = rt.tokenizer.decode(records[0].completion_token_ids)
    assert '"expression": "76 * 96"' in text and "7296" in text  # the call, the agent's result, the answer


@pytest.mark.skipif(check_available() is not None, reason="bubblewrap cannot run here")
def test_an_evaluation_with_agent_entry_runs_the_agent_greedily(tmp_path, tiny_model):
    rows = [{"id": f"sum-{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i), "verifier": "exact",
             "split": "eval" if i < 3 else "train"} for i in range(5)]  # fmt: skip
    domain = write_tasks(tmp_path, rows)
    cfg = agent_config(tmp_path, tiny_model, domain, k=4, temperature=1.0)
    rt = Runtime(cfg)
    try:
        result = run_evaluation(rt, tasks_per_level=8)
        tasks = eval_tasks(rt.domains, cfg.sampler, 8, cfg.eval.max_file_rows)
        ctx = rt.stage_context(
            -1, "eval-greedy", cfg.generation.model_copy(update={"k": 1, "temperature": 0.0})
        )
        store = SessionStore(Lake(cfg.lake_uri))
        sessions = {t.task_id: store.sessions([session_id(ctx, t, 0)]).to_pylist() for t in tasks}
        first = min(sessions.values(), key=len)[0]
        greedy = rt.engine.generate(
            [first["prompt_token_ids"]], SamplingSpec(n=1, temperature=0.0, max_tokens=8)
        )[0][0]
    finally:
        rt.close()
    assert sorted(t.prompt[-1]["content"] for t in tasks) == [f"What is {i} + {i}?" for i in range(3)]
    [group] = [g for g in result.groups if g["group"] == "held-out"]
    assert group["n"] == 3 and 0.0 <= group["ci_low"] <= group["pass@1"] <= group["ci_high"]
    assert sorted(store.ids()) == sorted(session_id(ctx, t, 0) for t in tasks)  # one agent run per task (k=1)
    for task_id, calls in sessions.items():
        assert calls, f"the agent made no call for {task_id}"
        for call in calls:
            assert (
                json.loads(call["request_json"])["temperature"] == 0.0
            )  # the agent asked for the SDK's default, 1.0
            assert json.loads(call["tools_json"])[0]["function"]["name"] == "calculator"
    assert first["completion_token_ids"] == greedy.token_ids  # greedy, the engine's own argmax
    # another policy version's evaluation plays the agent again (never v0's sessions read back)
    assert session_id(dataclasses.replace(ctx, policy_version=1), tasks[0], 0) != session_id(ctx, tasks[0], 0)
