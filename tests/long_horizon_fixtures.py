"""The scripted engines and helpers the long-horizon tests share (tests/test_long_horizon.py:
context policies, step-wise samples, the domain; tests/test_long_horizon_partial.py: partial
rollouts and scheduling): replies from each `longhorizon` task's reference script, over a
character-level chat tokenizer, in lockstep (`Replay`) or continuously batched (`Continuous`)."""

from __future__ import annotations

import time

from flywheel.environments import get_environment
from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.policy.engines.base import Engine, Sample, SamplingSpec
from flywheel.policy.engines.requests import ContinuousBatching, Requests
from flywheel.tasks.history import SUMMARY_REQUEST
from flywheel.tasks.multiturn import run_episodes
from tests.multiturn_fixtures import END, CharChatTokenizer, call_text

LH = get_environment("longhorizon")
TOK = CharChatTokenizer()
SPEC = SamplingSpec(n=1, max_tokens=4000)


def reference_script(task) -> list[str]:
    """The reference solution, one call per reply."""
    return [call_text(c) for c in LH.reference_calls(task)]


class Replay(Engine):
    """Replies from each task's script in order (the task's instruction marks its
    prompts; one episode per task), a summary when asked for one. Records every prompt it
    is given, and gives each sampled token the logprob `logprob` (a stand-in for the policy
    version that sampled it)."""

    name = "replay"

    def __init__(self, scripts: dict[str, list[str]], logprob: float = -0.25):
        self.scripts, self.logprob = scripts, logprob
        self.turn = {m: 0 for m in scripts}
        self.prompts: list[list[int]] = []

    def reply(self, prompt: list[int], budget: int) -> Sample:
        self.prompts.append(list(prompt))
        text = TOK.decode(prompt)
        marker = next(m for m in self.scripts if m in text)
        if text.rstrip().endswith(SUMMARY_REQUEST + END + "\n<|im_start|>assistant"):
            reply = f"Summary: {self.turn[marker]} calls made so far."
        else:
            script, i = self.scripts[marker], self.turn[marker]
            reply = script[i] if i < len(script) else "Nothing more."
            self.turn[marker] += 1
        ids = [ord(c) for c in reply + END][:budget]
        return Sample("".join(map(chr, ids)).removesuffix(END), ids, [self.logprob] * len(ids), "stop")

    def generate(self, prompts, spec):
        return [[self.reply(p, spec.max_tokens)] for p in prompts]

    def load_weights(self, hf_dir):
        raise NotImplementedError

    def prompt_logprobs(self, sequences, prompt_lens):
        raise NotImplementedError


def play(tasks, policy: ContextPolicy, engine=None, **kw):
    engine = engine or Replay({t.prompt[1]["content"]: reference_script(t) for t in tasks})
    groups = run_episodes(engine, TOK, kw.pop("sandbox"), [(t, LH, 1) for t in tasks], max_turns=200,
                          max_tokens=kw.pop("max_tokens", 10**7), sampling=SPEC, context=policy, **kw)  # fmt: skip
    return engine, [g[0] for g in groups]


def record(ep, group: str, cycle: int = 0, version: int = 0):
    from flywheel.config import FlywheelConfig
    from flywheel.tasks.context import StageContext
    from flywheel.tasks.records import trajectory_record

    cfg = FlywheelConfig(run_id="r")
    ctx = StageContext(config=cfg, run_id="r", cycle=cycle, label="train", policy_version=version, policy_lag=0,
                       generation=cfg.generation)  # fmt: skip
    rollout = ep.rollout()
    row = trajectory_record(ctx, rollout, rollout.episode_score)
    row.group_id = group  # episodes of two tasks as one group, for the advantages
    return row


class Continuous(Replay, ContinuousBatching):
    """The same replies from a continuously batching engine: each `collect` is a 2 ms step
    in which every request in flight advances by 8 tokens."""

    def requests(self) -> Requests:
        engine = self

        class Stepping(Requests):
            continuous = True

            def __init__(self):
                self.running: dict[str, list] = {}

            def submit(self, key, prompt, spec):
                sample = engine.reply(prompt, spec.max_tokens)
                self.running[key] = [sample, len(sample.token_ids) // 8 + 1]

            def collect(self):
                time.sleep(0.002)
                done = []
                for key, entry in list(self.running.items()):
                    entry[1] -= 1
                    if entry[1] <= 0:
                        done.append((key, self.running.pop(key)[0]))
                return done

            def pending(self):
                return len(self.running)

        return Stepping()
