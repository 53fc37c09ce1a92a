"""Batched multi-turn episodes: the policy calls tools in a sandbox workspace, turn by turn.

`run_episodes(engine, tokenizer, sandbox, jobs, ...)` plays k trajectories of each
(task, env, k) job. Each trajectory holds one `Workspace` (acquired at its start with
the env's setup files, released at its end) and its chat state. A turn is one request
to the engine (n=1: each trajectory has its own history); the reply's tool calls run on
a thread pool, their results are appended as `{"role": "tool"}` messages (a user
message "Tool result:\\n..." when the chat template has no tool role), and the next turn
is asked for at once; a trajectory retires on `submit`, on the turn budget, on the
token budget or on its wall time, and the env scores its final workspace
(`final_score`) before it is released. Where the user speaks in turns (`env.user_turns`:
BFCL), a reply without a call ends the user's turn instead: the user's next message
follows, and after the last one the trajectory retires as on `submit`.

Scheduling (tasks/scheduler.py, which plays the episodes made here). With an engine that
batches continuously (vLLM), each trajectory's next turn goes to the engine as soon as its
tools return; any other engine plays lockstep turns. At most `max_live` (capped at the
sandbox's `concurrency`) trajectories hold a workspace; the next starts when one is
released. Each episode counts its seconds waiting on the engine (`engine_s`: submit to
collect; in lockstep, the generate call) and tokens sampled in this run
(tasks/generate.py's `generation_stats` makes the stage's slot utilisation of them).

Tokens and context (tasks/history.py): the engine gets token ids, never a re-encoding of
the chat, and which part of the transcript it gets each turn is the episode's context
policy's call (environments/toolkit/context.py); every request is recorded as presented.

Stage budget (tasks/parking.py): once a `StageBudget` is spent no new turn is asked for;
a trajectory whose turn is due is parked (workspace captured and released, `parked` set)
or, without `carry`, ended ("stage_budget") and scored. Turns in the engine finish
first. `carried` episodes (parked earlier) are played on from where they stopped.

Trajectory fields (the GRPO convention):
  prompt_token_ids      the initial prompt;
  completion_token_ids  everything after it, assistant and observation ids in order;
  completion_logprobs   the engine's logprob for each token the model sampled and NaN for
                        each observation token. The trainer must mask NaN positions out
                        of the loss (policy/trainer.py does: their weight is zero, and
                        token_mean counts only the model's tokens).
  turns                 (step-wise episodes) each request: its prompt as presented, its
                        sampled ids and logprobs, the policy version that sampled them.
Not done: on CPU vLLM seeds the engine, not each request (policy/engines/vllm_engine.py),
so continuous turns, whose batches depend on timing, do not sample the same text twice;
lockstep (`continuous=False`) does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from flywheel.environments.base import Score
from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.agentic import (
    DEFAULT_WEIGHTS,
    MultiTurnEnvironment,
    RewardWeights,
)
from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.environments.toolkit.tool_formats import pick, template_has_tools
from flywheel.policy.chat import encode_chat
from flywheel.policy.engines.base import Sample, SamplingSpec
from flywheel.policy.engines.requests import open_requests
from flywheel.storage.schema import TaskSpec
from flywheel.tasks.history import History, has_tool_role, ids_of, opening, turn_records
from flywheel.tasks.parking import StageBudget
from flywheel.tasks.scheduler import Scheduler


@dataclass
class Episode:
    task: TaskSpec
    env: MultiTurnEnvironment
    sample_index: int
    messages: list[dict]
    prompt_token_ids: list[int]
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    num_turns: int = 0
    finish_reason: str = ""  # "submit", "max_turns", "max_tokens", "time_limit", "stage_budget" or "error"
    score: Score | None = None
    tools: list[dict] | None = None  # handed to the chat template (None: it cannot take them)
    seconds: float = 0.0  # from asking for a workspace to scored (or parked), over every stage it ran in
    user_turn: int = 0  # the user's turn in play (domains with `user_turns`: BFCL)
    history: History = field(
        default_factory=lambda: History(-1, [])
    )  # what the engine got (tasks/history.py)
    context: ContextPolicy = ContextPolicy()
    parked: bool = False  # unfinished at the end of a stage's budget (tasks/parking.py)
    workspace_tree: str | None = None  # a parked episode's files
    started_cycle: int | None = None  # set when parked: the cycle it began in
    engine_s: float = 0.0  # this run: seconds with a turn in the engine
    sampled: int = 0  # this run: tokens sampled
    stage: dict = field(default_factory=dict)  # the run it was played in: its slots and seconds

    def __post_init__(self):
        if self.history.opening < 0:  # a new episode: its opening is its prompt
            self.history = History(opening=len(self.messages), heads=[self.prompt_token_ids])

    @property
    def stepwise(self) -> bool:
        return self.context.stepwise_for(self.history.edited)

    def timings(self) -> dict:
        return {
            "episode_s": self.seconds,
            "engine_s": self.engine_s,
            "sampled_tokens": self.sampled,
            **self.stage,
        }

    def rollout(self, weights: RewardWeights = DEFAULT_WEIGHTS):
        """This scored episode as a `flywheel.tasks.records.Rollout` (with its turns when it
        trains step by step; begun in an earlier cycle: that cycle, and its oldest policy)."""
        from flywheel.tasks.records import Rollout

        versions = [t["policy_version"] for t in self.history.turns]
        return Rollout(
            task=self.task, sample_index=self.sample_index,
            messages=[{"role": m["role"], "content": m["content"]} for m in self.messages],
            prompt_token_ids=self.prompt_token_ids, completion_token_ids=self.completion_token_ids,
            completion_logprobs=self.completion_logprobs, finish_reason=self.finish_reason,
            timings=self.timings(), num_turns=self.num_turns, steps=self.steps,
            episode_score=self.score or Score(0.0, "error", error="not scored"),
            verifier_version=f"{self.env.name}-{self.env.version}",
            turns=turn_records(self, weights) if self.stepwise else None, started_cycle=self.started_cycle,
            policy_version=min(versions) if self.started_cycle is not None and versions else None,
        )  # fmt: skip


def run_episodes(engine, tokenizer, sandbox, jobs: list[tuple], *, max_turns: int = 8, max_tokens: int = 4096,
                 sampling: SamplingSpec | None = None, step_limits: Limits | None = None,
                 max_observation_chars: int = 2000, max_live: int | None = None,
                 weights: RewardWeights = DEFAULT_WEIGHTS, tool_format: str = "auto",
                 continuous: bool = True, on_episode=None, context=None, policy_version: int = 0,
                 stage_budget: StageBudget | None = None, carried: Sequence[Episode] = (),
                 episode_seconds: float | None = None) -> list[list[Episode]]:  # fmt: skip
    """Play every job's k trajectories; returns, per job, its k scored (or parked) Episodes.

    jobs: (task, env, k) with env a `MultiTurnEnvironment`. max_turns: assistant turns per
    trajectory. max_tokens: the prompt as presented plus its reply (the whole sequence
    without a context policy that edits); each turn may sample at most
    `sampling.max_tokens` and never past this budget.
    step_limits: the sandbox limits of each tool execution (default: the sandbox's).
    weights: how outcome and process rewards combine (environments/toolkit/agentic.py).
    tool_format: how the model writes calls (environments/toolkit/tool_formats.py; "auto": from its
    chat template). continuous: each turn goes to the engine as soon as it is ready, where
    the engine batches continuously (policy/engines/requests.py); False: lockstep turns.
    on_episode: called with each Episode once it is scored (progress).
    context: a ContextPolicy, or env -> ContextPolicy (default: the domain's `context`).
    policy_version: recorded on every turn sampled here. stage_budget: when to park (or cut).
    carried: parked episodes to finish (their own envs and histories). episode_seconds:
    a wall-time cap on every episode (a domain's own `budget(task).seconds` may be lower)."""
    sampling = sampling or SamplingSpec(n=1, max_tokens=512)
    tool_role = has_tool_role(tokenizer)
    fmt, takes_tools = pick(tokenizer, tool_format), template_has_tools(tokenizer)
    policy_of = context if callable(context) else (lambda env: context or env.context)
    episodes = []
    for task, env, k in jobs:
        messages, tools = opening(task, env, fmt, takes_tools)
        ids = encode_chat(tokenizer, messages, tools)
        episodes.append([Episode(task, env, i, [dict(m) for m in messages], list(ids), tools=tools,
                                 context=policy_of(env)) for i in range(k)])  # fmt: skip
    flat = [*carried, *(ep for group in episodes for ep in group)]
    for ep in flat:
        ep.parked, ep.engine_s, ep.sampled, ep.stage = False, 0.0, 0, {}
    slots = getattr(sandbox, "concurrency", 4)  # more live workspaces than slots would deadlock
    cap = max(1, min(max_live or slots, slots))
    requests = open_requests(engine, tokenizer, continuous)
    with ThreadPoolExecutor(max_workers=cap) as pool:
        play = Scheduler(requests, tokenizer, sandbox, pool, cap, max_turns, max_tokens, sampling, step_limits,
                     max_observation_chars, tool_role, weights, fmt, on_episode)  # fmt: skip
        play.version, play.budget, play.episode_seconds = policy_version, stage_budget, episode_seconds
        t0 = time.monotonic()
        try:
            play.run(flat)
            run = {"slots": cap, "play_s": time.monotonic() - t0}  # one run: one pair (generation_stats)
            for ep in flat:  # the slot-seconds its counts belong to
                ep.stage = dict(run)
        finally:
            requests.close()
            play.release_all()
    return episodes


class _Script:
    """An engine that answers the i-th call with the i-th scripted reply: the reference
    episode of one task, played through the same runner as the policy's episodes."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tok, self.replies, self.turn = tokenizer, replies, 0

    def generate(self, prompts, spec):
        text = self.replies[self.turn] if self.turn < len(self.replies) else ""
        self.turn += 1
        ids = ids_of(self.tok, text) + ([self.tok.eos_token_id] if self.tok.eos_token_id is not None else [])
        return [[Sample(text, ids, [0.0] * len(ids), "stop")] for _ in prompts]


def play_reference(tokenizer, sandbox, task, env, messages: list[dict], *, max_tokens: int = 4096,
                   weights: RewardWeights = DEFAULT_WEIGHTS, tool_format: str = "auto", context=None) -> Episode:  # fmt: skip
    """The episode of `env.reference(task)` (`messages`, one assistant message per turn),
    its tool calls executed in a real workspace and the result scored: an SFT
    demonstration whose observation tokens are marked NaN, as in a policy episode.
    `context`: as for `run_episodes` (the domain's own by default); where it edits the
    history, the demonstrations are the turns as presented (`rollout().turns`)."""
    from flywheel.environments.toolkit.agentic import tool_call_text

    fmt = pick(tokenizer, tool_format)
    replies = [tool_call_text(m, fmt) for m in messages]
    spec = SamplingSpec(n=1, temperature=0.0, max_tokens=max(len(ids_of(tokenizer, r)) for r in replies) + 2)
    return run_episodes(_Script(tokenizer, replies), tokenizer, sandbox, [(task, env, 1)], max_turns=len(replies),
                        max_tokens=max_tokens, sampling=spec, max_live=1, weights=weights,
                        tool_format=fmt.name, context=context)[0][0]  # fmt: skip
