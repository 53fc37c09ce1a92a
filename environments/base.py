"""The domain contract: a task source plus one of three declared kinds of verification.

Every domain, built in, read from a task file or installed as a plug-in, is an
`Environment`: it builds whole `TaskSpec`s for a (split, level, seed, count) and gives
one `reference(task)`, the assistant messages of a reply its verifier passes (for SFT).
How its answers are verified is declared by the class it derives from, and the generate
and score stages dispatch on that kind once:

- `CheckEnvironment` ("check"): `check(task, completion) -> Score` on the host, for
  checks that never execute or evaluate model text (exact answers, numbers, JSON fields);
- `SandboxEnvironment` ("sandbox"): `job(task, completion)` is a sandbox `Job` (or the
  final Score when there is nothing to run: no code in the completion, or a row of a
  task file whose check needs none) and `score(task, job, result)` reads its result;
  for unit tests, math-verify, user reward code: anything that runs or parses model text;
- `MultiTurnEnvironment` (environments/toolkit/agentic.py, "episode"): the model works
  with tools in a sandbox workspace; the episode runner scores the final state there.

Some sources offer more, declared as protocols and checked with isinstance: a finite list
of tasks (`ListsTasks`: task files), logged production failures (`LogsFailures`:
traces), rows set aside when read (`Quarantines`), rows checked once in the run's
sandbox before any is played (`ChecksTasks`: task files, workspace tasks).

`GeneratedTasks` is the helper of the seeded generators: `generate(level, rng)` returns a
`Draft` (content key, prompt, setup, verifier), and `make_tasks` turns drafts into whole
TaskSpecs, putting each on the split its content belongs to.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol, runtime_checkable

from flywheel.environments.sandbox import ExecResult, Job
from flywheel.storage.schema import TaskSpec, stable_id

Kind = Literal["check", "sandbox", "episode"]


@dataclass
class Score:
    reward: float
    verdict: str  # one of flywheel.storage.schema.VERDICTS
    outcome: float = 0.0
    process: float = 0.0
    penalty: float = 0.0
    tests_passed: int = 0
    tests_total: int = 0
    error: str = ""
    graded: bool = True  # False: the domain has no verdict of its own (reward.functions give it)


EVAL_FRACTION = 5  # one task content in five belongs to the eval split


def split_of(content_key: str) -> str:
    """The split is a function of the task's *content*, so two seeds that happen to make
    the same task can never put it on both sides of the train/eval line."""
    return "eval" if int(stable_id("split", content_key), 16) % EVAL_FRACTION == 0 else "train"


def check_split(split: str) -> None:
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', not {split!r}")


class Environment(ABC):
    """A domain: a source of whole TaskSpecs, and how they are verified (`kind`)."""

    name: str = "abstract"
    version: str = "0"
    levels: tuple[int, ...] = (1, 2, 3)
    kind: ClassVar[Kind]
    source: str = "built in"  # where it came from, for `flywheel domains`
    eval_only: bool = False  # every task held out: make_tasks("train", ...) is empty (an eval suite)
    # code each sandbox worker runs once before it forks (imports, warm caches), so every
    # job of this domain finds its libraries loaded; our own code, never a model's
    sandbox_warmup: str = ""

    @abstractmethod
    def make_tasks(self, split: str, level: int, seed: int, count: int) -> list[TaskSpec]:
        """Up to `count` tasks of `split` at `level`, the same for the same seed on every
        machine (fewer only where the source holds fewer)."""

    def describe(self) -> str:
        """A line for `flywheel domains` (a task file: its rows and verifiers)."""
        return ""

    def reference(self, task: TaskSpec) -> list[dict] | None:
        """The assistant messages of a reply to `task` that its verifier passes, in the
        OpenAI chat format (tool calls under `tool_calls`): one message for a
        single-turn domain, one per turn for a multi-turn one. None: the domain keeps no
        reference for this task."""
        return None


class CheckEnvironment(Environment):
    kind = "check"

    @abstractmethod
    def check(self, task: TaskSpec, completion: str) -> Score:
        """The Score of `completion`, computed on the host. Never executes or evaluates
        the completion's text."""


class SandboxEnvironment(Environment):
    kind = "sandbox"

    @abstractmethod
    def job(self, task: TaskSpec, completion: str) -> Job | Score:
        """The sandbox job that verifies `completion`, or its final Score when nothing
        needs to run (e.g. the completion holds no code)."""

    @abstractmethod
    def score(self, task: TaskSpec, job: Job, result: ExecResult) -> Score:
        """The Score of the job's result."""


# Optional capabilities: what some sources offer beyond the contract, declared here and
# checked with isinstance (never by probing for a method's name).
@runtime_checkable
class ListsTasks(Protocol):
    """A source that holds a finite list of tasks (a task file): an evaluation takes them
    all, where from a generator it takes `per_level` of each level."""

    def all_tasks(self, split: str) -> list[TaskSpec]: ...


@runtime_checkable
class LogsFailures(Protocol):
    """A source of a workload's production traces: the tasks whose logged response failed
    (the replay stage queues them) and those that passed (for the run's judge to look at)."""

    workload: str

    def logged_failures(self, split: str = "train") -> list[TaskSpec]: ...

    def logged_passes(self, split: str = "train") -> list[tuple[TaskSpec, str]]: ...


@runtime_checkable
class Quarantines(Protocol):
    """A source that set rows aside when it read them ({file, where, reason, row}): the
    run writes them beside its other outputs."""

    path: str
    rows: int
    quarantined: list[dict]


@runtime_checkable
class ChecksTasks(Protocol):
    """A source whose rows are checked once in the run's sandbox when it is up (a
    reference that fails, tests a stub or an untouched workspace passes): `validate`
    quarantines them and returns how many rows it ran."""

    path: str

    def validate(self, sandbox) -> int: ...


def reply(text: str) -> list[dict]:
    """A single-turn reference: one assistant message."""
    return [{"role": "assistant", "content": text}]


@dataclass
class Draft:
    """One generated task before it is placed: `key` is its content (it decides the
    split); the rest become the TaskSpec's prompt, setup and hidden verifier data."""

    key: str
    prompt: list[dict]
    setup: dict = field(default_factory=dict)
    verifier: dict = field(default_factory=dict)


class GeneratedTasks:
    """`make_tasks` for domains that generate tasks from a seed (mixed into an Environment)."""

    name: str
    version: str
    levels: tuple[int, ...]

    @abstractmethod
    def generate(self, level: int, rng: random.Random) -> Draft:
        """One candidate task at `level`."""

    eval_only: bool

    def make_tasks(self, split: str, level: int, seed: int, count: int) -> list[TaskSpec]:
        """Candidates whose content belongs to the other split are skipped (an eval-only
        domain's all belong to eval)."""
        check_split(split)
        if level not in self.levels:
            raise ValueError(f"domain {self.name!r} has levels {self.levels}, not {level}")
        if self.eval_only and split == "train":
            return []
        tasks: list[TaskSpec] = []
        attempt = 0
        while len(tasks) < count:
            task_seed = int(stable_id(self.name, seed, level, attempt), 16) % (2**62)
            attempt += 1
            draft = self.generate(level, random.Random(task_seed))
            if not self.eval_only and split_of(draft.key) != split:
                continue
            tasks.append(
                TaskSpec(
                    task_id=stable_id(self.name, self.version, split, task_seed, level), domain=self.name,
                    level=level, split=split, prompt=draft.prompt, setup_json=json.dumps(draft.setup),
                    verifier_json=json.dumps(draft.verifier), seed=task_seed, generator_version=self.version,
                )  # fmt: skip
            )
        return tasks
