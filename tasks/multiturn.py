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

Scheduling (policy/engines/requests.py). With an engine that batches continuously
(vLLM), turns are not in step: a trajectory's next turn joins the engine's running batch
the moment its tools return, so a short reply never waits for the slowest one of its
turn, nor a fast tool for the slowest tool, and a short episode is scored and frees its
workspace while long ones play on. Any other engine plays lockstep turns: ONE `generate`
call for all live trajectories per turn. At most `max_live` (capped at the sandbox's
`concurrency`) trajectories hold a workspace; the next starts when one is released. Each
episode counts its seconds waiting on the engine (`engine_s`: submit to collect; in
lockstep, the generate call) and tokens sampled in this run (tasks/generate.py's
`generation_stats` makes the stage's slot utilisation of them).

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
Not done: tool calls inside one turn run sequentially; on CPU vLLM seeds the engine,
not each request (policy/engines/vllm_engine.py), so continuous turns, whose batches
depend on timing, do not sample the same text twice; lockstep (`continuous=False`) does.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

from flywheel.environments.toolkit.agentic import (
    DEFAULT_WEIGHTS,
    EpisodeBudget,
    MultiTurnEnvironment,
    RewardWeights,
)
from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.environments.base import Score
from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.tool_formats import ToolFormat, pick, template_has_tools
from flywheel.environments.toolkit.tools import InvalidCall, execute, parse_tool_calls, step_record, truncate
from flywheel.policy.chat import encode_chat
from flywheel.policy.engines.base import Sample, SamplingSpec
from flywheel.policy.engines.requests import open_requests
from flywheel.storage.schema import TaskSpec, stable_id
from flywheel.tasks.history import (
    SUMMARY_REQUEST,
    History,
    Live,
    cut_tokens,
    has_tool_role,
    ids_of,
    opening,
    turn_records,
)
from flywheel.tasks.parking import StageBudget, capture, restore


def no_call(fmt: ToolFormat) -> str:
    """The observation after a reply that called nothing."""
    return f"[no tool call found: {fmt.no_call_hint}, or call submit]"


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
        play = _Play(requests, tokenizer, sandbox, pool, cap, max_turns, max_tokens, sampling, step_limits,
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


class _Play:
    """The scheduler. A trajectory moves through: acquiring a workspace (pool) -> waiting
    for its reply (engine) -> acting (pool) -> back to the engine, or scoring and releasing
    (pool), or parking (pool) once the stage's budget is spent. At most `cap` trajectories
    hold a workspace; the next one starts as soon as one is released. With a continuous
    engine each reply goes to the pool the moment it is collected and each next turn to
    the engine the moment its tools return; with lockstep requests the engine is run only
    when no trajectory is still acting or starting, so a turn's requests go out as one call."""

    def __init__(self, requests, tokenizer, sandbox, pool, cap, max_turns, max_tokens, sampling, limits,
                 max_chars, tool_role, weights, fmt, on_episode):  # fmt: skip
        self.requests, self.tok, self.sandbox, self.pool, self.cap = requests, tokenizer, sandbox, pool, cap
        self.max_turns, self.max_tokens, self.sampling, self.limits = max_turns, max_tokens, sampling, limits
        self.max_chars, self.tool_role, self.weights, self.fmt = max_chars, tool_role, weights, fmt
        self.on_episode = on_episode or (lambda ep: None)
        self.version, self.episode_seconds = 0, None
        self.budget: StageBudget | None = None
        self.closing, self.sampled_total = False, 0  # the stage's budget is spent; tokens sampled
        self.held: list[Live] = []  # holding a workspace
        self.starting: dict[Future, Episode] = {}
        self.acting: dict[Future, Live] = {}
        self.ending: dict[Future, Live] = {}
        self.parking: dict[Future, Live] = {}
        self.asked: dict[str, Live] = {}  # request key -> trajectory
        self.started: dict[int, float] = {}  # id(episode) -> when it asked for a workspace

    def run(self, flat: list[Episode]) -> None:
        queue = collections.deque(flat)
        t0 = time.monotonic()
        while queue or self.starting or self.acting or self.ending or self.parking or self.asked:
            if self.budget and not self.closing:
                self.closing = self.budget.spent(self.sampled_total, time.monotonic() - t0)
            while queue and len(self.held) + len(self.starting) < self.cap:
                ep = queue.popleft()
                if self.closing and self._carry:
                    ep.parked = True  # not begun here: it keeps what it had (nothing, or its files)
                    continue
                self.started[id(ep)] = time.monotonic()
                self.starting[self.pool.submit(_try(self._acquire), ep)] = ep
            moved = self._settle()
            if self.requests.pending() and (self.requests.continuous or not (self.acting or self.starting)):
                t = time.monotonic()
                for key, sample in self.requests.collect():
                    lv = self.asked.pop(key)
                    lv.ep.engine_s += time.monotonic() - (lv.asked_at if self.requests.continuous else t)
                    lv.ep.sampled += len(sample.token_ids)
                    self.sampled_total += len(sample.token_ids)
                    if lv.add_sample(sample, self.version) == "summary":
                        lv.install_summary(sample.text)
                        self._ask(lv)
                        continue
                    acting = self.pool.submit(_act, lv, sample, self.limits, self.max_chars, self.fmt)
                    self.acting[acting] = lv
            elif not moved:
                wait([*self.starting, *self.acting, *self.ending, *self.parking], return_when=FIRST_COMPLETED)

    @property
    def _carry(self) -> bool:
        """Park the unfinished at the budget (else end and score them)."""
        return self.budget is None or self.budget.carry

    def _settle(self) -> bool:
        """Take in every pool job that is done; whether there was any."""
        done = [f for f in (*self.starting, *self.acting, *self.ending, *self.parking) if f.done()]
        for f in done:
            if f in self.starting:
                ep, got = self.starting.pop(f), f.result()
                if isinstance(got, Live):
                    self.held.append(got)
                    self._ask(got)
                else:
                    ep.finish_reason, ep.score = "error", Score(0.0, "error", error=f"no workspace: {got}")
                    ep.seconds += time.monotonic() - self.started.pop(id(ep))
                    self.on_episode(ep)
            elif f in self.acting:
                lv = self.acting.pop(f)
                self._after_act(lv, *f.result())  # an exception here ends the run, as it always did
            elif f in self.parking:
                lv, tree = self.parking.pop(f), f.result()
                self.held.remove(lv)
                lv.ep.seconds += time.monotonic() - self.started.pop(id(lv.ep))
                if tree.startswith("["):  # the captured tree (a JSON list), else why it failed
                    lv.ep.workspace_tree, lv.ep.parked = tree, True
                else:
                    lv.ep.finish_reason, lv.ep.score = (
                        "error",
                        Score(0.0, "error", error=f"parking failed: {tree}"),
                    )
                    self.on_episode(lv.ep)
            else:
                lv = self.ending.pop(f)
                score = f.result()
                if not isinstance(score, Score):
                    score = Score(0.0, "error", error=f"scoring failed: {score}")
                lv.ep.score = score
                lv.ep.seconds += time.monotonic() - self.started.pop(id(lv.ep))
                self.held.remove(lv)
                self.on_episode(lv.ep)
        return bool(done)

    def _over(self, lv: Live) -> bool:
        budget = lv.ep.env.budget(lv.ep.task)
        turns = min(self.max_turns, budget.max_turns or self.max_turns)
        caps = [s for s in (budget.seconds, self.episode_seconds) if s]
        budget = replace(budget, seconds=min(caps) if caps else None)
        elapsed = lv.ep.seconds + time.monotonic() - self.started[id(lv.ep)]
        return _out_of_budget(lv, turns, self.max_tokens, budget, elapsed)

    def _ask(self, lv: Live) -> None:
        if self._over(lv):
            return self._end(lv)
        if self.closing:
            if self._carry:
                return self._park(lv)
            lv.ep.finish_reason = "stage_budget"
            return self._end(lv)
        ep = lv.ep
        turn = len(ep.history.turns)  # == num_turns until a summary is asked for
        key = stable_id(ep.task.task_id, ep.sample_index, turn, id(lv))
        seed = self.sampling.seed  # each trajectory's turn its own stream (where the engine seeds requests)
        if seed is not None:
            seed = int(stable_id(seed, ep.task.task_id, ep.sample_index, turn), 16) % (2**31)
        budget = min(self.sampling.max_tokens, self.max_tokens - lv.length())
        if ep.history.summary_due:
            budget = min(budget, ep.context.summary_tokens)
        lv.asked_at = time.monotonic()
        self.requests.submit(key, lv.prompt(), replace(self.sampling, n=1, max_tokens=budget, seed=seed))
        self.asked[key] = lv

    def _after_act(self, lv: Live, observations: list[str | dict], submitted: bool) -> None:
        if submitted:
            lv.ep.finish_reason = "submit"
            return self._end(lv)
        if self._over(lv):
            return self._end(lv)
        policy = lv.ep.context
        msgs = [o if isinstance(o, dict) else  # the user's next turn
                _result(cut_tokens(self.tok, o, policy.observation_tokens) if policy.cuts_observations else o,
                        self.tool_role)
                for o in observations]  # fmt: skip
        ids = lv.observation_ids(msgs)
        if lv.wants_summary(len(ids), self.max_tokens):  # the same results, then the request for a summary
            del lv.ep.messages[-len(msgs) :]
            msgs = [*msgs, {"role": "user", "content": SUMMARY_REQUEST}]
            ids = lv.observation_ids(msgs)
            lv.history.summary_due = True
        if lv.length(len(ids)) >= self.max_tokens:  # no room left to answer: end before them
            del lv.ep.messages[-len(msgs) :]  # messages stay in step with the tokens
            lv.history.summary_due = False
            lv.ep.finish_reason = "max_tokens"
            return self._end(lv)
        lv.commit_observations(ids)
        self._ask(lv)

    def _end(self, lv: Live) -> None:
        def score_and_release(lv):
            try:
                return lv.ep.env.final_score(lv.ep.task, lv.ws, lv.ep.steps, self.weights)
            finally:
                lv.ws.release()

        self.ending[self.pool.submit(_try(score_and_release), lv)] = lv

    def _park(self, lv: Live) -> None:
        def capture_and_release(lv):
            try:
                return capture(lv.ws)
            finally:
                lv.ws.release()

        self.parking[self.pool.submit(_try(capture_and_release), lv)] = lv

    def _acquire(self, ep: Episode) -> Live:
        if ep.workspace_tree is not None:  # parked: its own files again
            ws, ep.workspace_tree = restore(ep.env, self.sandbox, ep.task, ep.workspace_tree), None
        else:
            ws = ep.env.open_workspace(self.sandbox, ep.task)
        return Live(ep, ws, ep.context, self.tok)

    def release_all(self) -> None:
        """After a failure: the workspaces of trajectories that did not finish go back."""
        wait([*self.starting, *self.acting, *self.ending, *self.parking])
        self.held += [f.result() for f in self.starting if isinstance(f.result(), Live)]
        ended = {id(lv) for lv in [*self.ending.values(), *self.parking.values()]}
        for lv in self.held:
            if id(lv) not in ended:
                _try(lambda lv: lv.ws.release())(lv)


def _result(text: str, tool_role: bool) -> dict:
    return (
        {"role": "tool", "content": text}
        if tool_role
        else {"role": "user", "content": "Tool result:\n" + text}
    )


def _out_of_budget(lv: Live, max_turns: int, max_tokens: int, budget: EpisodeBudget | None = None,
                   elapsed: float = 0.0) -> bool:  # fmt: skip
    if lv.length() >= max_tokens:
        lv.ep.finish_reason = "max_tokens"
    elif lv.ep.num_turns >= max_turns:
        lv.ep.finish_reason = "max_turns"
    elif budget is not None and budget.seconds is not None and elapsed >= budget.seconds:
        lv.ep.finish_reason = "time_limit"
    else:
        return False
    return True


def _act(lv: Live, sample, limits, max_chars, fmt: ToolFormat) -> tuple[list[str | dict], bool]:
    """Run the sample's tool calls in order, up to a submit; (observations, submitted).
    Where the user speaks in turns (`env.user_turns`), a reply without a call ends the
    user's turn: the observation is the user's next message, or the episode is over."""
    env = lv.ep.env
    table = env.tools_at(lv.ep.task, lv.ep.user_turn)
    limits = env.budget(lv.ep.task).call_limits or limits
    calls = parse_tool_calls(sample.text, list(table), fmt, table)
    if not calls and env.user_turns:
        message = env.next_user_message(lv.ep.task, lv.ws, lv.ep.user_turn)
        lv.ep.user_turn += 1
        return ([{"role": "user", "content": message}], False) if message is not None else ([], True)
    if not calls:
        invalid = InvalidCall(truncate(sample.text, 300)[0], "no tool call in the reply")
        lv.ep.steps.append(step_record(invalid, execute(lv.ws, invalid)))
        return [no_call(fmt)], False
    observations: list[str | dict] = []
    for call in calls:
        result = env.run_call(lv.ep.task, lv.ws, call, table, limits=limits, max_chars=max_chars)
        lv.ep.steps.append(step_record(call, result))
        if result.submitted:
            return observations, True
        observations.append(result.observation)
    return observations, False


def _try(fn):
    def wrapped(arg):
        try:
            return fn(arg)
        except Exception as exc:  # noqa: BLE001  one trajectory's infrastructure failure must not end the others
            return f"{type(exc).__name__}: {exc}"

    return wrapped


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
