"""Batched multi-turn episodes: the policy calls tools in a sandbox workspace, turn by turn.

`run_episodes(engine, tokenizer, sandbox, jobs, ...)` plays k trajectories of each
(task, env, k) job. Each trajectory holds one `Workspace` (acquired at its start with
the env's setup files, released at its end) and its chat state. A turn is one request
to the engine (n=1: each trajectory has its own history); the reply's tool calls run on
a thread pool, their results are appended as `{"role": "tool"}` messages (a user
message "Tool result:\\n..." when the chat template has no tool role), and the next turn
is asked for at once; a trajectory retires on `submit`, on the turn budget or on the
token budget, and the env scores its final workspace (`final_score`) before it is
released. Where the user speaks in turns (`env.user_turns`: BFCL), a reply without a
call ends the user's turn instead: the user's next message follows, and after the last
one the trajectory retires as on `submit`.

Scheduling (policy/engines/requests.py). With an engine that batches continuously
(vLLM), turns are not in step: a trajectory's next turn joins the engine's running batch
the moment its tools return, while others are still sampling, so a short reply never
waits for the slowest one of its turn, nor a fast tool for the slowest tool. Any other
engine plays lockstep turns: ONE `generate` call for all live trajectories per turn.
At most `max_live` (capped at the sandbox's `concurrency`) trajectories hold a workspace;
the next one starts when one is released.

Tokens. The engine is prompted with the trajectory's own token sequence, never with a
re-encoding of the chat, so the ids the trainer sees are exactly the ids the engine
conditioned on and sampled. The sequence is: the encoded initial prompt, then for each
turn the model's sampled ids as they came out, then the observation ids: the text the
chat template adds after the sampled text (end of the assistant turn, the tool
message(s), the next assistant header), tokenized alone. That text is the rendered chat
after the decoded sequence so far; when the template rewrites assistant text so that
the decoded sequence is not a prefix of the render, it is the render after the
assistant message instead.

Trajectory fields (the GRPO convention):
  prompt_token_ids      the initial prompt;
  completion_token_ids  everything after it, assistant and observation ids in order;
  completion_logprobs   the engine's logprob for each token the model sampled and NaN for
                        each observation token. The trainer must mask NaN positions out
                        of the loss (policy/trainer.py does: their weight is zero, and
                        token_mean counts only the model's tokens).
Not done: tool calls inside one turn run sequentially; on CPU vLLM seeds the engine,
not each request (policy/engines/vllm_engine.py), so continuous turns, whose batches
depend on timing, do not sample the same text twice; lockstep (`continuous=False`) does.
"""

from __future__ import annotations

import collections
import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS, EpisodeBudget, MultiTurnEnvironment, RewardWeights
from flywheel.environments.base import Score
from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.tool_formats import ToolFormat, pick, template_has_tools
from flywheel.environments.toolkit.tools import InvalidCall, execute, parse_tool_calls, step_record, tool_specs, truncate
from flywheel.policy.chat import encode_chat
from flywheel.policy.engines.base import Sample, SamplingSpec
from flywheel.policy.engines.requests import open_requests
from flywheel.storage.schema import TaskSpec, stable_id


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
    finish_reason: str = ""  # "submit", "max_turns", "max_tokens", "time_limit", or "error"
    score: Score | None = None
    tools: list[dict] | None = None  # handed to the chat template (None: it cannot take them)
    seconds: float = 0.0  # from asking for a workspace to scored
    user_turn: int = 0  # the user's turn in play (domains with `user_turns`: BFCL)

    def rollout(self):
        """This scored episode as a `flywheel.tasks.records.Rollout`."""
        from flywheel.tasks.records import Rollout

        return Rollout(
            task=self.task, sample_index=self.sample_index,
            messages=[{"role": m["role"], "content": m["content"]} for m in self.messages],
            prompt_token_ids=self.prompt_token_ids, completion_token_ids=self.completion_token_ids,
            completion_logprobs=self.completion_logprobs, finish_reason=self.finish_reason,
            timings={"episode_s": self.seconds}, num_turns=self.num_turns, steps=self.steps,
            episode_score=self.score or Score(0.0, "error", error="not scored"),
            verifier_version=f"{self.env.name}-{self.env.version}",
        )  # fmt: skip


def _render(tokenizer, messages, generation_prompt: bool, tools: list[dict] | None = None) -> str:
    extra = {"tools": tools} if tools else {}  # only then: not every tokenizer takes the argument
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=False, **extra
    )


def opening(task, env, fmt: ToolFormat, takes_tools: bool) -> tuple[list[dict], list[dict] | None]:
    """The episode's first messages and the tools for the template: the domain's system
    prompt (written for Hermes when the task was made) rewritten for `fmt`, without the
    tool list when the template renders `tools=` itself. A task's own system prompt stays."""
    messages = [dict(m) for m in task.prompt]
    table = env.tool_table(task)
    specs = tool_specs(list(table), table)
    if messages and messages[0]["role"] == "system" and messages[0]["content"] == env.system_prompt_for(task):
        messages[0]["content"] = fmt.system_prompt(env.intro, specs, takes_tools, env.done_hint)
    return messages, (specs if takes_tools else None)


def has_tool_role(tokenizer) -> bool:
    """Whether the chat template renders a tool message (some raise, some drop it)."""
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
             {"role": "tool", "content": "tool-probe-7f3a"}]  # fmt: skip
    try:
        return "tool-probe-7f3a" in _render(tokenizer, probe, True)
    except Exception:  # noqa: BLE001  (templates reject unknown roles in many ways)
        return False


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


class _Live:
    """One trajectory in play: its episode record, workspace and token sequence."""

    def __init__(self, episode: Episode, ws):
        self.ep, self.ws = episode, ws

    @property
    def length(self) -> int:
        return len(self.ep.prompt_token_ids) + len(self.ep.completion_token_ids)

    def add_sample(self, sample) -> None:
        self.ep.completion_token_ids += list(sample.token_ids)
        self.ep.completion_logprobs += [float(x) for x in sample.logprobs]
        self.ep.messages.append({"role": "assistant", "content": sample.text})
        self.ep.num_turns += 1

    def observation_ids(self, tokenizer, messages: list[dict]) -> list[int]:
        """Adds the messages to the chat; returns their ids (not yet in the sequence)."""
        through_assistant = _render(tokenizer, self.ep.messages, False, self.ep.tools)
        self.ep.messages += messages
        after = _render(tokenizer, self.ep.messages, True, self.ep.tools)
        so_far = tokenizer.decode(
            self.ep.prompt_token_ids + self.ep.completion_token_ids, skip_special_tokens=False
        )
        if after.startswith(so_far):
            delta = after[len(so_far) :]
        else:  # the template rewrote the assistant text: close the turn as the template would
            common = 0
            while (
                common < min(len(after), len(through_assistant))
                and after[common] == through_assistant[common]
            ):
                common += 1
            delta = after[common:]
        return _ids(tokenizer, delta)

    def commit_observations(self, ids: list[int]) -> None:
        self.ep.completion_token_ids += ids
        self.ep.completion_logprobs += [math.nan] * len(ids)


def run_episodes(engine, tokenizer, sandbox, jobs: list[tuple], *, max_turns: int = 8, max_tokens: int = 4096,
                 sampling: SamplingSpec | None = None, step_limits: Limits | None = None,
                 max_observation_chars: int = 2000, max_live: int | None = None,
                 weights: RewardWeights = DEFAULT_WEIGHTS, tool_format: str = "auto",
                 continuous: bool = True, on_episode=None) -> list[list[Episode]]:  # fmt: skip
    """Play every job's k trajectories; returns, per job, its k scored Episodes.

    jobs: (task, env, k) with env a `MultiTurnEnvironment`. max_turns: assistant turns per
    trajectory. max_tokens: the whole sequence (prompt, assistant and observation tokens);
    each turn may sample at most `sampling.max_tokens` and never past this budget.
    step_limits: the sandbox limits of each tool execution (default: the sandbox's).
    weights: how outcome and process rewards combine (environments/toolkit/agentic.py).
    tool_format: how the model writes calls (environments/toolkit/tool_formats.py; "auto": from its
    chat template). continuous: each turn goes to the engine as soon as it is ready, where
    the engine batches continuously (policy/engines/requests.py); False: lockstep turns.
    on_episode: called with each Episode once it is scored (progress)."""
    sampling = sampling or SamplingSpec(n=1, max_tokens=512)
    tool_role = has_tool_role(tokenizer)
    fmt, takes_tools = pick(tokenizer, tool_format), template_has_tools(tokenizer)
    episodes = []
    for task, env, k in jobs:
        messages, tools = opening(task, env, fmt, takes_tools)
        ids = encode_chat(tokenizer, messages, tools)
        episodes.append(
            [Episode(task, env, i, [dict(m) for m in messages], list(ids), tools=tools) for i in range(k)]
        )
    flat = [ep for group in episodes for ep in group]
    slots = getattr(sandbox, "concurrency", 4)  # more live workspaces than slots would deadlock
    cap = max(1, min(max_live or slots, slots))
    requests = open_requests(engine, tokenizer, continuous)
    with ThreadPoolExecutor(max_workers=cap) as pool:
        play = _Play(requests, tokenizer, sandbox, pool, cap, max_turns, max_tokens, sampling, step_limits,
                     max_observation_chars, tool_role, weights, fmt, on_episode)  # fmt: skip
        try:
            play.run(flat)
        finally:
            requests.close()
            play.release_all()
    return episodes


class _Play:
    """The scheduler. A trajectory moves through: acquiring a workspace (pool) -> waiting
    for its reply (engine) -> acting (pool) -> back to the engine, or scoring and releasing
    (pool). At most `cap` trajectories hold a workspace; the next one starts as soon as
    one is released. With a continuous engine each reply goes to the pool the moment it is
    collected and each next turn to the engine the moment its tools return; with lockstep
    requests the engine is run only when no trajectory is still acting or starting, so a
    turn's requests go out as one call."""

    def __init__(self, requests, tokenizer, sandbox, pool, cap, max_turns, max_tokens, sampling, limits,
                 max_chars, tool_role, weights, fmt, on_episode):  # fmt: skip
        self.requests, self.tok, self.sandbox, self.pool, self.cap = requests, tokenizer, sandbox, pool, cap
        self.max_turns, self.max_tokens, self.sampling, self.limits = max_turns, max_tokens, sampling, limits
        self.max_chars, self.tool_role, self.weights, self.fmt = max_chars, tool_role, weights, fmt
        self.on_episode = on_episode or (lambda ep: None)
        self.held: list[_Live] = []  # holding a workspace
        self.starting: dict[Future, Episode] = {}
        self.acting: dict[Future, _Live] = {}
        self.ending: dict[Future, _Live] = {}
        self.asked: dict[str, _Live] = {}  # request key -> trajectory
        self.started: dict[int, float] = {}  # id(episode) -> when it asked for a workspace

    def run(self, flat: list[Episode]) -> None:
        queue = collections.deque(flat)
        while queue or self.starting or self.acting or self.ending or self.asked:
            while queue and len(self.held) + len(self.starting) < self.cap:
                ep = queue.popleft()
                self.started[id(ep)] = time.monotonic()
                self.starting[self.pool.submit(_try(self._acquire), ep)] = ep
            moved = self._settle()
            if self.requests.pending() and (self.requests.continuous or not (self.acting or self.starting)):
                for key, sample in self.requests.collect():
                    lv = self.asked.pop(key)
                    lv.add_sample(sample)
                    acting = self.pool.submit(_act, lv, sample, self.limits, self.max_chars, self.fmt)
                    self.acting[acting] = lv
            elif not moved:
                wait([*self.starting, *self.acting, *self.ending], return_when=FIRST_COMPLETED)

    def _settle(self) -> bool:
        """Take in every pool job that is done; whether there was any."""
        done = [f for f in (*self.starting, *self.acting, *self.ending) if f.done()]
        for f in done:
            if f in self.starting:
                ep, got = self.starting.pop(f), f.result()
                if isinstance(got, _Live):
                    self.held.append(got)
                    self._ask(got)
                else:
                    ep.finish_reason, ep.score = "error", Score(0.0, "error", error=f"no workspace: {got}")
                    ep.seconds = time.monotonic() - self.started.pop(id(ep))
                    self.on_episode(ep)
            elif f in self.acting:
                lv = self.acting.pop(f)
                self._after_act(lv, *f.result())  # an exception here ends the run, as it always did
            else:
                lv = self.ending.pop(f)
                score = f.result()
                if not isinstance(score, Score):
                    score = Score(0.0, "error", error=f"scoring failed: {score}")
                lv.ep.score = score
                lv.ep.seconds = time.monotonic() - self.started.pop(id(lv.ep))
                self.held.remove(lv)
                self.on_episode(lv.ep)
        return bool(done)

    def _over(self, lv: _Live) -> bool:
        budget = lv.ep.env.budget(lv.ep.task)
        turns = min(self.max_turns, budget.max_turns or self.max_turns)
        elapsed = time.monotonic() - self.started[id(lv.ep)]
        return _out_of_budget(lv, turns, self.max_tokens, budget, elapsed)

    def _ask(self, lv: _Live) -> None:
        if self._over(lv):
            return self._end(lv)
        ep = lv.ep
        key = stable_id(ep.task.task_id, ep.sample_index, ep.num_turns, id(lv))
        seed = self.sampling.seed  # each trajectory's turn its own stream (where the engine seeds requests)
        if seed is not None:
            seed = int(stable_id(seed, ep.task.task_id, ep.sample_index, ep.num_turns), 16) % (2**31)
        budget = min(self.sampling.max_tokens, self.max_tokens - lv.length)
        self.requests.submit(key, ep.prompt_token_ids + ep.completion_token_ids,
                             replace(self.sampling, n=1, max_tokens=budget, seed=seed))  # fmt: skip
        self.asked[key] = lv

    def _after_act(self, lv: _Live, observations: list[str | dict], submitted: bool) -> None:
        if submitted:
            lv.ep.finish_reason = "submit"
            return self._end(lv)
        if self._over(lv):
            return self._end(lv)
        msgs = [o if isinstance(o, dict) else  # the user's next turn
                {"role": "tool", "content": o} if self.tool_role else {"role": "user", "content": "Tool result:\n" + o}
                for o in observations]  # fmt: skip
        ids = lv.observation_ids(self.tok, msgs)
        if lv.length + len(ids) >= self.max_tokens:  # no room left to answer: end before them
            del lv.ep.messages[-len(msgs) :]  # messages stay in step with the tokens
            lv.ep.finish_reason = "max_tokens"
            return self._end(lv)
        lv.commit_observations(ids)
        self._ask(lv)

    def _end(self, lv: _Live) -> None:
        def score_and_release(lv):
            try:
                return lv.ep.env.final_score(lv.ep.task, lv.ws, lv.ep.steps, self.weights)
            finally:
                lv.ws.release()

        self.ending[self.pool.submit(_try(score_and_release), lv)] = lv

    def _acquire(self, ep: Episode) -> _Live:
        return _Live(ep, ep.env.open_workspace(self.sandbox, ep.task))

    def release_all(self) -> None:
        """After a failure: the workspaces of trajectories that did not finish go back."""
        wait([*self.starting, *self.acting, *self.ending])
        self.held += [f.result() for f in self.starting if isinstance(f.result(), _Live)]
        ended = {id(lv) for lv in self.ending.values()}
        for lv in self.held:
            if id(lv) not in ended:
                _try(lambda lv: lv.ws.release())(lv)


def _out_of_budget(lv: _Live, max_turns: int, max_tokens: int, budget: EpisodeBudget | None = None,
                   elapsed: float = 0.0) -> bool:  # fmt: skip
    if lv.length >= max_tokens:
        lv.ep.finish_reason = "max_tokens"
    elif lv.ep.num_turns >= max_turns:
        lv.ep.finish_reason = "max_turns"
    elif budget is not None and budget.seconds is not None and elapsed >= budget.seconds:
        lv.ep.finish_reason = "time_limit"
    else:
        return False
    return True


def _act(lv: _Live, sample, limits, max_chars, fmt: ToolFormat) -> tuple[list[str | dict], bool]:
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
        ids = _ids(self.tok, text) + ([self.tok.eos_token_id] if self.tok.eos_token_id is not None else [])
        return [[Sample(text, ids, [0.0] * len(ids), "stop")] for _ in prompts]


def play_reference(tokenizer, sandbox, task, env, messages: list[dict], *, max_tokens: int = 4096,
                   weights: RewardWeights = DEFAULT_WEIGHTS, tool_format: str = "auto") -> Episode:  # fmt: skip
    """The episode of `env.reference(task)` (`messages`, one assistant message per turn),
    its tool calls executed in a real workspace and the result scored: an SFT
    demonstration whose observation tokens are marked NaN, as in a policy episode."""
    from flywheel.environments.toolkit.agentic import tool_call_text

    fmt = pick(tokenizer, tool_format)
    replies = [tool_call_text(m, fmt) for m in messages]
    spec = SamplingSpec(n=1, temperature=0.0, max_tokens=max(len(_ids(tokenizer, r)) for r in replies) + 2)
    return run_episodes(_Script(tokenizer, replies), tokenizer, sandbox, [(task, env, 1)], max_turns=len(replies),
                        max_tokens=max_tokens, sampling=spec, max_live=1, weights=weights,
                        tool_format=fmt.name)[0][0]  # fmt: skip
