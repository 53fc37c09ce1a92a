"""Test doubles for multi-turn runs: a character-level ChatML tokenizer and a scripted
engine that replays pre-written assistant replies (a deterministic "policy"), plus a
helper that plays a list of tool calls straight into a workspace. The sandbox is real."""

from __future__ import annotations

import json
import time

import pytest

from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.tools import ToolCall, execute, step_record
from flywheel.policy.engines.base import Engine, Sample
from flywheel.policy.engines.requests import ContinuousBatching, Requests

END = "<|im_end|>"


class CharChatTokenizer:
    """One token per character (id = code point); a ChatML template with or without a tool role."""

    eos_token_id = None  # END is spelt out in characters, not one token

    def __init__(self, tool_role: bool = True):
        self.tool_role = tool_role

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        out = []
        for m in messages:
            if m["role"] == "tool" and not self.tool_role:
                raise ValueError("roles must alternate user/assistant")
            out.append(f"<|im_start|>{m['role']}\n{m['content']}{END}\n")
        return "".join(out) + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


def call_text(*calls: dict) -> str:
    return "Let me act.\n" + "\n".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


class ScriptedEngine(Engine):
    """Replays `scripts[marker][turn]` for the prompt containing `marker`; records each call's batch."""

    name = "scripted"

    def __init__(self, scripts: dict[str, list[str]], tokenizer, logprob: float = -0.25):
        self.scripts, self.tok, self.logprob = scripts, tokenizer, logprob
        self.calls: list[tuple[int, int]] = []  # (number of prompts, max_tokens)

    def generate(self, prompts, spec):
        self.calls.append((len(prompts), spec.max_tokens))
        out = []
        for prompt in prompts:
            text = self.tok.decode(prompt)
            marker = next(m for m in self.scripts if m in text)
            turn = text.count("<|im_start|>assistant") - 1
            script = self.scripts[marker]
            reply = script[turn] if turn < len(script) else "I have nothing more to do."
            ids = [ord(c) for c in reply + END][: spec.max_tokens]
            finish = "stop" if len(ids) == len(reply) + len(END) else "length"
            out.append([Sample(reply[: len(ids)], ids, [self.logprob] * len(ids), finish)])
        return out

    def load_weights(self, hf_dir):
        raise NotImplementedError("a scripted engine has no weights")

    def prompt_logprobs(self, sequences, prompt_lens):
        raise NotImplementedError("a scripted engine has no weights")


class ScriptedContinuousEngine(ScriptedEngine, ContinuousBatching):
    """The same replies from an engine that batches continuously: each `collect` is one
    decode step (`step_s` long) in which every request in flight gains a token, and a
    request ends when its reply is out. `events` logs (step, "submit"|"finish", turn, the
    turns of the other requests in flight) so that tests can see who waited for whom."""

    def __init__(self, scripts, tokenizer, step_s: float = 0.002):
        super().__init__(scripts, tokenizer)
        self.step_s, self.steps, self.events = step_s, 0, []

    def requests(self) -> Requests:
        return _ScriptedRequests(self)


class _ScriptedRequests(Requests):
    continuous = True

    def __init__(self, engine: ScriptedContinuousEngine):
        self.engine, self.running = engine, {}  # key -> [sample, tokens left, turn]

    def submit(self, key, prompt, spec):
        ((sample,),) = self.engine.generate([prompt], spec)
        turn = self.engine.tok.decode(prompt).count("<|im_start|>assistant") - 1
        others = sorted(entry[2] for entry in self.running.values())
        self.running[key] = [sample, len(sample.token_ids), turn]
        self.engine.events.append((self.engine.steps, "submit", turn, others))

    def collect(self):
        time.sleep(self.engine.step_s)
        self.engine.steps += 1
        done = []
        for key, entry in list(self.running.items()):
            entry[1] -= 1
            if entry[1] <= 0:
                del self.running[key]
                done.append((key, entry[0]))
                others = sorted(e[2] for e in self.running.values())
                self.engine.events.append((self.engine.steps, "finish", entry[2], others))
        return done

    def pending(self):
        return len(self.running)

    def close(self):
        self.running.clear()


def play(env, task, box, calls: list[dict]):
    """Run tool calls directly in a fresh workspace (no engine) and score the final state."""
    with box.workspace(env.setup_files(task)) as ws:
        steps = []
        for c in calls:
            call = ToolCall(c["name"], c.get("arguments", {}))
            result = execute(ws, call, test_command=env.test_command(task))
            steps.append(step_record(call, result))
            if result.submitted:
                break
        return env.final_score(task, ws, steps), steps


@pytest.fixture(scope="module")
def box():
    from flywheel.environments.sandbox.bwrap import BwrapSandbox

    sandbox = BwrapSandbox(Limits(wall_s=10, memory_mb=512, output_bytes=65536), concurrency=4)
    yield sandbox
    sandbox.close()
