"""The episode runner's scheduler: which trajectory waits on what, turn after turn.

tasks/multiturn.py makes the episodes and hands them here; this module moves each one
from its workspace to the engine, its tool calls, and its scoring or parking, and owns
nothing the episode keeps (its record is tasks/multiturn.py's `Episode`, its transcript
tasks/history.py's). It is apart from the runner because it is most of its code and the
one part that reasons about concurrency.

With an engine that batches continuously (vLLM), turns are not in step: a trajectory's
next turn joins the engine's running batch the moment its tools return, so a short reply
never waits for the slowest one of its turn, nor a fast tool for the slowest tool, and a
short episode is scored and frees its workspace while long ones play on. Any other engine
plays lockstep turns: ONE `generate` call for all live trajectories per turn
(policy/engines/requests.py). Not done: tool calls inside one turn run sequentially.
"""

from __future__ import annotations

import collections
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace
from typing import TYPE_CHECKING

from flywheel.environments.base import Score
from flywheel.environments.toolkit.agentic import EpisodeBudget
from flywheel.environments.toolkit.tool_formats import ToolFormat
from flywheel.environments.toolkit.tools import InvalidCall, execute, parse_tool_calls, step_record, truncate
from flywheel.storage.schema import stable_id
from flywheel.tasks.history import SUMMARY_REQUEST, Live, cut_tokens
from flywheel.tasks.parking import StageBudget, capture, restore

if TYPE_CHECKING:
    from flywheel.tasks.multiturn import Episode


def no_call(fmt: ToolFormat) -> str:
    """The observation after a reply that called nothing."""
    return f"[no tool call found: {fmt.no_call_hint}, or call submit]"


class Scheduler:
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
