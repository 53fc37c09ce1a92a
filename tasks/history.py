"""An episode's token sequence, and what of it the engine is given each turn.

The transcript. The engine is prompted with token ids, never with a re-encoding of the
chat, so the ids the trainer sees are exactly the ids the engine conditioned on and
sampled. An episode's transcript is: the encoded opening prompt (`prompt_token_ids`),
then for each turn the model's sampled ids as they came out, then the observation ids:
the text the chat template adds after the sampled text (end of the assistant turn, the
tool message(s), the next assistant header), tokenized alone. That text is the rendered
chat after the decoded sequence so far; when the template rewrites assistant text so
that the decoded sequence is not a prefix of the render, it is the render after the
assistant message instead. Logprobs are the engine's for sampled ids, NaN for the rest.

The prompt as presented. The episode's `ContextPolicy` (environments/toolkit/context.py)
picks what the engine gets: the transcript so far (none, truncate), or a *head* followed
by a tail of the transcript. A head is the opening re-encoded with a note appended to the
task's user message: for a window, that earlier turns are hidden (the tail starts at the
first kept turn's sampled ids; the window moves several turns at a time, so that most
prompts go on from the one before and the engine's prefix cache holds); for a summary, the summary the model wrote (the tail
starts after it). A turn's observation ends with the next assistant header, as the head
does, so a tail cut at a turn boundary reads as a well-formed chat. Summary turns: once
the next prompt would reach `summarise_at` tokens, a user message asking for a summary
follows the tool results; the reply is sampled, kept in the transcript and recorded like
any other turn, and installs the new head.

Each request is recorded (`History.turns`) as (head, tail start, tail end) over the
append-only transcript plus its sampled ids, logprobs and the policy version that sampled
them: `prompt_ids(turn)` gives back exactly the ids the engine was given, so a turn
trains on what the model saw, token for token, whatever the policy cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.environments.toolkit.tool_formats import ToolFormat
from flywheel.environments.toolkit.tools import tool_specs
from flywheel.policy.chat import encode_chat

WINDOW_NOTE = "[Earlier turns of this episode are hidden to save space; the most recent ones follow.]"
SUMMARY_REQUEST = (
    "Your context is nearly full. Summarise the work so far: what you found and changed, what remains, "
    "and every name or value you still need. The summary replaces the earlier turns. Call no tool in this reply."
)
SUMMARY_NOTE = "A summary you wrote of your earlier turns (they are no longer shown):\n"
AFTER_SUMMARY = "[The turns above were replaced by your summary.]"


def render(tokenizer, messages, generation_prompt: bool, tools: list[dict] | None = None) -> str:
    extra = {"tools": tools} if tools else {}  # only then: not every tokenizer takes the argument
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=False, **extra
    )


def ids_of(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def cut_tokens(tokenizer, text: str, limit: int) -> str:
    """`text` cut to about `limit` tokens: its head (2/5) and tail around a marker."""
    ids = ids_of(tokenizer, text)
    if len(ids) <= limit:
        return text
    head = limit * 2 // 5
    tail = limit - head
    dropped = len(ids) - head - tail
    return (f"{tokenizer.decode(ids[:head], skip_special_tokens=True)}\n[... {dropped} tokens dropped ...]\n"
            f"{tokenizer.decode(ids[-tail:], skip_special_tokens=True)}")  # fmt: skip


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
        return "tool-probe-7f3a" in render(tokenizer, probe, True)
    except Exception:  # noqa: BLE001  (templates reject unknown roles in many ways)
        return False


@dataclass
class History:
    """The episode's view of its transcript (plain data: it is parked with the episode)."""

    opening: int  # messages of the opening (system prompt, task)
    heads: list[list[int]]  # heads[0] is the opening prompt; later ones the window's, each summary's
    head: int = 0  # the head in use (summarise)
    view_from: int = 0  # where in the transcript the prompt goes on after that head
    window_head: int = -1  # heads index of the window's head, once made
    turn_starts: list[int] = field(default_factory=list)  # transcript offset of each act turn's sample
    step_starts: list[int] = field(default_factory=list)  # steps before each act turn (per-turn rewards)
    turns: list[dict] = field(default_factory=list)  # one per request (`Live.add_sample`)
    edited: bool = False  # a prompt dropped or replaced something an earlier one showed
    summary_due: bool = False  # the next request asks for the summary


class Live:
    """One trajectory in play: its episode record (tasks/multiturn.py), workspace and context."""

    def __init__(self, episode, ws, policy: ContextPolicy, tokenizer):
        self.ep, self.ws, self.policy, self.tok = episode, ws, policy, tokenizer
        self.asked: tuple[int, int, int] | None = None  # the request in flight: (head, start, end)
        self.asked_at = 0.0
        h = episode.history
        if policy.mode == "window" and h.window_head < 0:
            h.heads.append(self.head_with(WINDOW_NOTE))
            h.window_head = len(h.heads) - 1

    @property
    def history(self) -> History:
        return self.ep.history

    # ---- the prompt as presented -----------------------------------------------------------
    def span(self) -> tuple[int, int]:
        """(head, start of the transcript tail) of the next prompt."""
        h = self.history
        hidden = self.policy.hidden(len(h.turn_starts))
        return (h.window_head, h.turn_starts[hidden]) if hidden else (h.head, h.view_from)

    def length(self, extra: int = 0) -> int:
        """Tokens of the next prompt, with `extra` more observation ids appended."""
        head, start = self.span()
        return len(self.history.heads[head]) + len(self.ep.completion_token_ids) + extra - start

    def prompt(self) -> list[int]:
        """The next prompt's ids, as the engine gets them (remembered for `add_sample`)."""
        head, start = self.span()
        if head == self.history.window_head:
            self.history.edited = True
        self.asked = (head, start, len(self.ep.completion_token_ids))
        return self.history.heads[head] + self.ep.completion_token_ids[start:]

    def prompt_ids(self, turn: dict) -> list[int]:
        return self.history.heads[turn["head"]] + self.ep.completion_token_ids[turn["start"] : turn["end"]]

    def head_with(self, note: str) -> list[int]:
        """The opening with `note` after the task's words (one user message, so templates that
        want user and assistant to alternate still render it)."""
        opening = [dict(m) for m in self.ep.messages[: self.history.opening]]
        if opening and opening[-1]["role"] == "user":
            opening[-1]["content"] = f"{opening[-1]['content']}\n\n{note}"
        else:
            opening.append({"role": "user", "content": note})
        return encode_chat(self.tok, opening, self.ep.tools)

    # ---- the transcript ----------------------------------------------------------------------
    def add_sample(self, sample, policy_version: int) -> str:
        """Append a reply and record its request; the turn's kind ("act" or "summary")."""
        h, ep = self.history, self.ep
        kind = "summary" if h.summary_due else "act"
        assert self.asked is not None, "a reply to no request"
        head, start, end = self.asked
        h.turns.append({"kind": kind, "head": head, "start": start, "end": end, "policy_version": policy_version,
                        "completion_token_ids": list(sample.token_ids),
                        "completion_logprobs": [float(x) for x in sample.logprobs]})  # fmt: skip
        if kind == "act":
            h.turn_starts.append(len(ep.completion_token_ids))
            h.step_starts.append(len(ep.steps))
            ep.num_turns += 1
        ep.completion_token_ids += list(sample.token_ids)
        ep.completion_logprobs += [float(x) for x in sample.logprobs]
        ep.messages.append({"role": "assistant", "content": sample.text})
        return kind

    def observation_ids(self, messages: list[dict]) -> list[int]:
        """Adds the messages to the chat; returns their ids (not yet in the sequence)."""
        tokenizer = self.tok
        through_assistant = render(tokenizer, self.ep.messages, False, self.ep.tools)
        self.ep.messages += messages
        after = render(tokenizer, self.ep.messages, True, self.ep.tools)
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
        return ids_of(tokenizer, delta)

    def commit_observations(self, ids: list[int]) -> None:
        self.ep.completion_token_ids += ids
        self.ep.completion_logprobs += [math.nan] * len(ids)

    # ---- summaries ---------------------------------------------------------------------------
    def wants_summary(self, extra: int, max_tokens: int) -> bool:
        """Whether the next prompt, `extra` observation ids longer, calls for a summary first
        (not when what it would replace is hardly longer than a summary: an opening as long as
        the threshold would otherwise call for one every turn)."""
        if self.policy.mode != "summarise" or self.history.summary_due:
            return False
        at, head = self.policy.summarise_at or max_tokens * 3 // 4, self.span()[0]
        tail = self.length(extra) - len(self.history.heads[head])  # what a summary would replace
        return (
            self.length(extra) + self.policy.summary_tokens >= at and tail >= 2 * self.policy.summary_tokens
        )

    def install_summary(self, text: str) -> None:
        """The summary just sampled becomes the head; the transcript notes the replacement."""
        h = self.history
        self.commit_observations(self.observation_ids([{"role": "user", "content": AFTER_SUMMARY}]))
        h.heads.append(self.head_with(SUMMARY_NOTE + text.strip()))
        h.head, h.view_from = len(h.heads) - 1, len(self.ep.completion_token_ids)
        h.summary_due, h.edited = False, True


def turn_records(ep, weights) -> list[dict]:
    """Each request of `ep` as the lake keeps it (storage/schema.py TURN): its prompt ids as
    presented, and for act turns the domain's process reward (`env.turn_rewards`)."""
    h = ep.history
    starts = h.step_starts + [len(ep.steps)]
    rewards = ep.env.turn_rewards(ep.task, [ep.steps[a:b] for a, b in zip(starts, starts[1:])])
    acts = iter(range(len(h.step_starts)))
    out = []
    for t in h.turns:
        act = next(acts) if t["kind"] == "act" else None
        reward = weights.turn * rewards[act] if rewards is not None and act is not None else None
        out.append({"kind": t["kind"], "policy_version": t["policy_version"], "reward": reward,
                    "prompt_token_ids": h.heads[t["head"]] + ep.completion_token_ids[t["start"] : t["end"]],
                    "completion_token_ids": t["completion_token_ids"],
                    "completion_logprobs": t["completion_logprobs"]})  # fmt: skip
    return out
