"""Batched multi-turn episodes: the policy calls tools in a sandbox workspace, turn by turn.

`run_episodes(engine, tokenizer, sandbox, jobs, ...)` plays k trajectories of each
(task, env, k) job. Each trajectory holds one `Workspace` (acquired at its start with
the env's setup files, released at its end) and its chat state. Every turn makes ONE
`engine.generate` call for all live trajectories (n=1 per prompt, since each trajectory
has its own history), then runs all their tool calls at once on a thread pool, appends
the results as `{"role": "tool"}` messages (a user message "Tool result:\\n..." when the
chat template has no tool role), and retires a trajectory on `submit`, on the turn budget
or on the token budget. The env then scores the final workspace (`final_score`).

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
Waves: workspaces come from a pool of `sandbox.concurrency` slots, and all of a wave's
trajectories hold one for their whole episode, so at most `max_live` (capped at the
sandbox's concurrency) trajectories play at once; more trajectories run in further waves.
Not done: streaming (a turn waits for the slowest sample), tool calls inside one turn
run sequentially.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from environments.agentic import DEFAULT_WEIGHTS, RewardWeights
from environments.base import Score
from environments.sandbox import Limits
from environments.tool_formats import ToolFormat, pick, template_has_tools
from environments.tools import InvalidCall, execute, parse_tool_calls, step_record, tool_specs, truncate
from policy.chat import encode_chat
from policy.engines.base import Sample, SamplingSpec


def no_call(fmt: ToolFormat) -> str:
    """The observation after a reply that called nothing."""
    return f"[no tool call found: {fmt.no_call_hint}, or call submit]"


@dataclass
class Episode:
    task: object
    env: object
    sample_index: int
    messages: list[dict]
    prompt_token_ids: list[int]
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    num_turns: int = 0
    finish_reason: str = ""  # "submit", "max_turns", "max_tokens", or "error"
    score: Score | None = None
    tools: list[dict] | None = None  # handed to the chat template (None: it cannot take them)

    def rollout(self, seconds: float):
        """This scored episode as a `tasks.records.Rollout`."""
        from tasks.records import Rollout

        return Rollout(
            task=self.task, sample_index=self.sample_index,
            messages=[{"role": m["role"], "content": m["content"]} for m in self.messages],
            prompt_token_ids=self.prompt_token_ids, completion_token_ids=self.completion_token_ids,
            completion_logprobs=self.completion_logprobs, finish_reason=self.finish_reason,
            timings={"episode_s": seconds}, num_turns=self.num_turns, steps=self.steps,
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
    specs = tool_specs(list(env.tools))
    if messages and messages[0]["role"] == "system" and messages[0]["content"] == env.system_prompt:
        messages[0]["content"] = fmt.system_prompt(env.intro, specs, takes_tools)
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
                 weights: RewardWeights = DEFAULT_WEIGHTS, tool_format: str = "auto") -> list[list[Episode]]:  # fmt: skip
    """Play every job's k trajectories; returns, per job, its k scored Episodes.

    jobs: (task, env, k) with env a `MultiTurnEnvironment`. max_turns: assistant turns per
    trajectory. max_tokens: the whole sequence (prompt, assistant and observation tokens);
    each turn may sample at most `sampling.max_tokens` and never past this budget.
    step_limits: the sandbox limits of each tool execution (default: the sandbox's).
    weights: how outcome and process rewards combine (environments/agentic.py).
    tool_format: how the model writes calls (environments/tool_formats.py; "auto": from its
    chat template)."""
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
    wave = max(1, min(max_live or slots, slots))
    with ThreadPoolExecutor(max_workers=wave) as pool:
        for start in range(0, len(flat), wave):
            _play(engine, tokenizer, sandbox, flat[start : start + wave], pool, max_turns, max_tokens, sampling,
                  step_limits, max_observation_chars, tool_role, weights, fmt)  # fmt: skip
    return episodes


def _play(
    engine,
    tokenizer,
    sandbox,
    batch,
    pool,
    max_turns,
    max_tokens,
    sampling,
    limits,
    max_chars,
    tool_role,
    weights,
    fmt,
):
    def acquire(ep):
        return _Live(ep, sandbox.workspace(ep.env.setup_files(ep.task)))

    acquired = list(pool.map(_try(acquire), batch))
    lives = [a for a in acquired if isinstance(a, _Live)]
    for ep, got in zip(batch, acquired):
        if not isinstance(got, _Live):
            ep.finish_reason, ep.score = "error", Score(0.0, "error", error=f"no workspace: {got}")
    try:
        live = [lv for lv in lives if not _out_of_budget(lv, max_turns, max_tokens)]
        while live:
            # ONE generate call per turn; a sequence near the total budget is cut to it afterwards
            budgets = [min(sampling.max_tokens, max_tokens - lv.length) for lv in live]
            outs = engine.generate([lv.ep.prompt_token_ids + lv.ep.completion_token_ids for lv in live],
                                   replace(sampling, n=1, max_tokens=max(budgets)))  # fmt: skip
            samples = [_cut(tokenizer, out[0], budget) for out, budget in zip(outs, budgets)]
            for lv, sample in zip(live, samples):
                lv.add_sample(sample)
            results = list(
                pool.map(
                    lambda a: _act(*a, limits, max_chars, fmt), [(lv, s) for lv, s in zip(live, samples)]
                )
            )
            still = []
            for lv, (observations, submitted) in zip(live, results):
                if submitted:
                    lv.ep.finish_reason = "submit"
                    continue
                if _out_of_budget(lv, max_turns, max_tokens):
                    continue
                msgs = [{"role": "tool", "content": o} if tool_role else {"role": "user", "content": "Tool result:\n" + o}
                        for o in observations]  # fmt: skip
                ids = lv.observation_ids(tokenizer, msgs)
                if lv.length + len(ids) >= max_tokens:  # no room left to answer: end before them
                    del lv.ep.messages[-len(msgs) :]  # messages stay in step with the tokens
                    lv.ep.finish_reason = "max_tokens"
                    continue
                lv.commit_observations(ids)
                still.append(lv)
            live = still
        scores = pool.map(
            _try(lambda lv: lv.ep.env.final_score(lv.ep.task, lv.ws, lv.ep.steps, weights)), lives
        )
        for lv, score in zip(lives, scores):
            lv.ep.score = (
                score if isinstance(score, Score) else Score(0.0, "error", error=f"scoring failed: {score}")
            )
    finally:
        list(pool.map(_try(lambda lv: lv.ws.release()), lives))


def _cut(tokenizer, sample, budget: int):
    if len(sample.token_ids) <= budget:
        return sample
    ids = list(sample.token_ids[:budget])
    return Sample(
        tokenizer.decode(ids, skip_special_tokens=True), ids, list(sample.logprobs[:budget]), "length"
    )


def _out_of_budget(lv: _Live, max_turns: int, max_tokens: int) -> bool:
    if lv.length >= max_tokens:
        lv.ep.finish_reason = "max_tokens"
    elif lv.ep.num_turns >= max_turns:
        lv.ep.finish_reason = "max_turns"
    else:
        return False
    return True


def _act(lv: _Live, sample, limits, max_chars, fmt: ToolFormat) -> tuple[list[str], bool]:
    """Run the sample's tool calls in order, up to a submit; (observations, submitted)."""
    env = lv.ep.env
    calls = parse_tool_calls(sample.text, list(env.tools), fmt)
    if not calls:
        call = InvalidCall(truncate(sample.text, 300)[0], "no tool call in the reply")
        lv.ep.steps.append(step_record(call, execute(lv.ws, call)))
        return [no_call(fmt)], False
    observations = []
    for call in calls:
        result = execute(
            lv.ws, call, limits=limits, test_command=env.test_command(lv.ep.task), max_chars=max_chars
        )
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
    from environments.agentic import tool_call_text

    fmt = pick(tokenizer, tool_format)
    replies = [tool_call_text(m, fmt) for m in messages]
    spec = SamplingSpec(n=1, temperature=0.0, max_tokens=max(len(_ids(tokenizer, r)) for r in replies) + 2)
    return run_episodes(_Script(tokenizer, replies), tokenizer, sandbox, [(task, env, 1)], max_turns=len(replies),
                        max_tokens=max_tokens, sampling=spec, max_live=1, weights=weights,
                        tool_format=fmt.name)[0][0]  # fmt: skip
