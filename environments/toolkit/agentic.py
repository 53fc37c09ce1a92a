"""What a multi-turn domain adds to `Environment`, and the process rewards they share.

A multi-turn domain works in a sandbox `Workspace` that the episode runner
(tasks/multiturn.py) holds for the whole trajectory: `setup_files(task)` seeds it,
`system_prompt`/`task.prompt` open the chat, `test_command(task)` is what the
`run_tests` tool runs, and after the episode `final_score(task, ws, steps)` inspects the
workspace and returns the `Score`.

Rewards, kept apart in the Score (outcome, process, penalty) and combined with the
weights of `RewardWeights`:
- outcome: the domain's verdict on the final state (fraction of hidden tests or checks);
- valid: the fraction of the tool calls that parsed and named a known tool;
- progress: how much of the gap between the checks satisfied at the start and all of
  them the episode closed (negative progress, i.e. breaking things, counts as 0);
- recovery: the fraction of failed calls that some later call succeeded after (1.0 when
  nothing failed: there was nothing to recover from).
reward = (w_outcome * outcome + sum(w_i * process_i)) / (w_outcome + sum(w_i)), so a
perfect, clean episode scores exactly 1.0 and the process terms only shape the rest;
`Score.process` holds the weighted process part before that normalisation. A suspected
hack scores 0, with what it would have earned as a negative `penalty`.

Per task, a domain may say more (workspace tasks as data do; the defaults are the
class's): `tool_table(task)` the tools offered (a task may bring its own),
`open_workspace(sandbox, task)` how its workspace is set up (setup commands, a prepared
template), `budget(task)` its turns, per-call limits and episode wall time, and
`system_prompt_for(task)` the system prompt its prompt opens with. A domain may also set
`context`, the context policy its long episodes default to (environments/toolkit/context.py),
and give `turn_rewards(task, turns)`, a process reward per turn for step-wise training.

A conversation where the user speaks more than once (BFCL's multi-turn entries) sets
`user_turns`: there a reply without a tool call ends the user's turn, and
`next_user_message(task, ws, turn)` gives the next one (None: the conversation is over,
finish_reason "submit"). Any domain may also say `tools_at(task, turn)`, the tools a call
may name in that turn (default: `tool_table`, which the opening lists), `run_call`, how a
call is carried out (default: `execute`), and `done_hint`, the system prompt's last sentence.

The kind is "episode" (environments/base.py): these domains have no single-turn check
or job; generate plays them with flywheel.tasks.multiturn.run_episodes, which scores each one.
`reference(task)` gives the tool calls of a passing episode as assistant messages, one
call per turn; `tool_call_text` renders such a message in the format the model is asked
to write.

Tool-call accuracy. Where a source says which calls a correct episode makes (BFCL's ground
truth), `expected_calls(task)` returns them and `call_accuracy(task, steps)` compares the
episode's valid calls with them (`sequence_accuracy`); the score stage keeps it as the
reward component `tool_call_accuracy` (not part of the reward), which the agentic views
average (storage/agentic.py). By default there are none: `reference_calls` of repair and
terminal is one passing solution among many, so closeness to it measures nothing.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from dataclasses import dataclass

from flywheel.environments.base import Environment, Score
from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.environments.sandbox import Workspace
from flywheel.environments.toolkit.tool_formats import BY_NAME, DONE, ToolFormat
from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.tools import InvalidCall, StepResult, ToolCall, execute
from flywheel.environments.toolkit.tools import KNOWN_SPECS, is_valid, tools_prompt
from flywheel.storage.schema import TaskSpec


@dataclass(frozen=True)
class RewardWeights:
    outcome: float = 1.0
    valid: float = 0.1
    progress: float = 0.1
    recovery: float = 0.1
    turn: float = 0.1  # the domain's per-turn process rewards (`turn_rewards`), for step-wise training


def process_components(steps: list[dict], start: float, end: float) -> dict[str, float]:
    """The process reward components of an episode; start/end: fraction of checks satisfied."""
    valid = sum(is_valid(s) for s in steps) / len(steps) if steps else 0.0
    gap = 1.0 - start
    progress = max(0.0, min(1.0, (end - start) / gap)) if gap > 1e-9 else (1.0 if end >= start else 0.0)
    failed = [i for i, s in enumerate(steps) if s["exit_code"] != 0]
    recovered = sum(any(s["exit_code"] == 0 for s in steps[i + 1 :]) for i in failed)
    recovery = recovered / len(failed) if failed else 1.0
    return {"valid": valid, "progress": progress, "recovery": recovery}


def combine(outcome: float, parts: dict[str, float], weights: RewardWeights) -> tuple[float, float]:
    """(reward, weighted process part)."""
    process = sum(getattr(weights, k) * v for k, v in parts.items())
    total = weights.outcome + sum(getattr(weights, k) for k in parts)
    return (weights.outcome * outcome + process) / max(total, 1e-9), process


DEFAULT_WEIGHTS = RewardWeights()


@dataclass(frozen=True)
class EpisodeBudget:
    """A task's own bounds; None: the runner's."""

    max_turns: int | None = None
    call_limits: Limits | None = None  # the sandbox limits of each tool call
    seconds: float | None = None  # the whole episode's wall time (finish_reason "time_limit")


class MultiTurnEnvironment(Environment):
    kind = "episode"
    tools: tuple[str, ...] = ("run_shell", "read_file", "write_file", "run_tests", "submit")
    intro = "You are an agent working in a sandboxed Linux directory."
    done_hint = DONE  # the system prompt's last sentence
    user_turns = False  # True: a reply without a tool call ends the user's turn (next_user_message)
    context = ContextPolicy()  # what the model sees of its history (environments/toolkit/context.py)

    @property
    def system_prompt(self) -> str:
        return tools_prompt(self.intro, list(self.tools))

    @abstractmethod
    def setup_files(self, task: TaskSpec) -> dict[str, str]:
        """The files the workspace starts with."""

    def system_prompt_for(self, task: TaskSpec) -> str:
        """The system prompt `task.prompt` opens with (the runner rewrites it for the model's format)."""
        return self.system_prompt

    def tool_table(self, task: TaskSpec) -> dict[str, dict]:
        """The tools `task` offers: name -> spec (environments/toolkit/tools.py)."""
        return {n: KNOWN_SPECS[n] for n in self.tools}

    def open_workspace(self, sandbox, task: TaskSpec) -> Workspace:
        """A workspace from `sandbox` ready for `task` (its `reset()` returns to this state)."""
        return sandbox.workspace(self.setup_files(task))

    def budget(self, task: TaskSpec) -> EpisodeBudget:
        return EpisodeBudget()

    def tools_at(self, task: TaskSpec, turn: int) -> dict[str, dict]:
        """The tools a call may name in the user's turn `turn` (0-based); by default `tool_table`."""
        return self.tool_table(task)

    def run_call(self, task: TaskSpec, ws: Workspace, call: ToolCall | InvalidCall, table: dict[str, dict], *,
                 limits: Limits | None, max_chars: int) -> StepResult:  # fmt: skip
        """Carry out one parsed call in `ws` (never raises): by default `execute`."""
        return execute(ws, call, limits=limits, test_command=self.test_command(task), max_chars=max_chars,
                       specs=table)  # fmt: skip

    def next_user_message(self, task: TaskSpec, ws: Workspace, turn: int) -> str | None:
        """With `user_turns`: the user's turn `turn` is over (a reply made no call); the
        next user message, or None when the conversation is over."""
        return None

    def turn_rewards(self, task: TaskSpec, turns: list[list[dict]]) -> list[float] | None:
        """A process reward in [0, 1] for each act turn, from its steps (`turns[i]`: the steps
        of turn i); None (the default): the domain has none, each turn shares the episode's."""
        return None

    def test_command(self, task: TaskSpec) -> list[str] | None:
        """argv that `run_tests` runs in the workspace; None: no visible tests."""
        return None

    @abstractmethod
    def final_score(
        self, task: TaskSpec, ws: Workspace, steps: list[dict], weights: RewardWeights = DEFAULT_WEIGHTS
    ) -> Score:
        """Score the finished episode from the workspace's final state."""

    def reference_calls(self, task: TaskSpec) -> list[dict] | None:
        """The tool calls ({"name", "arguments"}) of a passing episode; None: none kept."""
        return None

    def expected_calls(self, task: TaskSpec) -> list[dict] | None:
        """The calls ({"name", "arguments"}) the source says a correct episode makes, in
        order; None (the default): there is no one right sequence."""
        return None

    def call_accuracy(self, task: TaskSpec, steps: list[dict]) -> float | None:
        """How closely the episode's calls (`steps`) match `expected_calls`; None without them."""
        expected = self.expected_calls(task)
        return None if expected is None else sequence_accuracy(made_calls(steps), expected)

    def reference(self, task: TaskSpec) -> list[dict] | None:
        calls = self.reference_calls(task)
        if calls is None:
            return None
        return [
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments", {})}}]}
            for c in calls
        ]  # fmt: skip

    def make_score(
        self,
        outcome: float,
        start: float,
        end: float,
        steps: list[dict],
        *,
        weights: RewardWeights,
        passed: int,
        total: int,
        hack: list[str] | None = None,
        error: str = "",
    ) -> Score:
        """The Score of an episode, from its outcome and the check fractions at start and end."""
        reward, process = combine(outcome, process_components(steps, start, end), weights)
        if hack:
            return Score(0.0, "suspected_hack", outcome=outcome, process=process, penalty=-reward,
                         tests_passed=passed, tests_total=total, error="audit: " + "; ".join(hack))  # fmt: skip
        verdict = "pass" if total and passed == total else "fail"
        return Score(reward, verdict, outcome=outcome, process=process, tests_passed=passed,
                     tests_total=total, error=error)  # fmt: skip


def made_calls(steps: list[dict]) -> list[dict]:
    """The valid calls ({"name", "arguments"}) of an episode's steps, in order."""
    return [json.loads(s["action"]) for s in steps if is_valid(s)]


def sequence_accuracy(made: list[dict], expected: list[dict]) -> float:
    """The longest common subsequence of the two call lists over the longer one: 1.0 only
    for the expected calls in order and nothing else; each missing, extra, misplaced or
    wrong call lowers it. A call matches when its name and arguments are equal (1 == 1.0);
    `submit` is left out of both (it only ends the episode). Two empty lists: 1.0."""
    a = [(c["name"], c.get("arguments") or {}) for c in made if c["name"] != "submit"]
    b = [(c["name"], c.get("arguments") or {}) for c in expected if c["name"] != "submit"]
    if not a and not b:
        return 1.0
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0  # the row above, one column left
        for j, y in enumerate(b):
            prev, row[j + 1] = row[j + 1], prev + 1 if x == y else max(row[j + 1], row[j])
    return row[-1] / max(len(a), len(b))


def tool_call_text(message: dict, fmt: ToolFormat | None = None) -> str:
    """An assistant message with `tool_calls` as the text the model is asked to write in
    format `fmt` (environments/toolkit/tool_formats.py; Hermes by default)."""
    calls = [{"name": c["function"]["name"], "arguments": c["function"].get("arguments", {})}
             for c in message.get("tool_calls") or []]  # fmt: skip
    rendered = (fmt or BY_NAME["hermes"]).render(calls) if calls else ""
    return "\n".join(t for t in [message.get("content") or "", rendered] if t)
