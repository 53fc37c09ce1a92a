"""The environment protocol: what a domain must provide, and the shared scoring record.

A domain is one file with one `Environment` subclass. It generates tasks deterministically
from (split, level, seed); it turns a finished completion into a sandbox `Job` that its
verifier runs; and it turns the job's result into a `Score`. Scoring is split in two so
the score stage can run every trajectory's verification at once on the sandbox pool.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass

from environments.sandbox import ExecResult, Job
from storage.schema import TaskSpec, stable_id


@dataclass
class Score:
    reward: float
    verdict: str  # one of storage.schema.VERDICTS
    outcome: float = 0.0
    process: float = 0.0
    penalty: float = 0.0
    tests_passed: int = 0
    tests_total: int = 0
    error: str = ""


EVAL_FRACTION = 5  # one task content in five belongs to the eval split


def split_of(content_key: str) -> str:
    """The split is a function of the task's *content*, so two seeds that happen to make
    the same task can never put it on both sides of the train/eval line."""
    return "eval" if int(stable_id("split", content_key), 16) % EVAL_FRACTION == 0 else "train"


class Environment(ABC):
    name: str = "abstract"
    version: str = "0"
    levels: tuple[int, ...] = (1, 2, 3)

    @abstractmethod
    def generate(self, level: int, rng: random.Random) -> tuple[str, TaskSpec]:
        """One candidate task at `level`: (content key, spec with split unset)."""

    def make_tasks(self, split: str, level: int, seed: int, count: int) -> list[TaskSpec]:
        """`count` tasks of `split` at `level`, the same for the same seed on every machine.
        Candidates whose content belongs to the other split are skipped."""
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
        if level not in self.levels:
            raise ValueError(f"domain {self.name!r} has levels {self.levels}, not {level}")
        tasks: list[TaskSpec] = []
        attempt = 0
        while len(tasks) < count:
            task_seed = int(stable_id(self.name, seed, level, attempt), 16) % (2**62)
            attempt += 1
            key, spec = self.generate(level, random.Random(task_seed))
            if split_of(key) != split:
                continue
            spec.split, spec.seed = split, task_seed
            spec.task_id = stable_id(self.name, self.version, split, task_seed, level)
            tasks.append(spec)
        return tasks

    @abstractmethod
    def verification_job(self, task: TaskSpec, completion: str) -> Job | Score:
        """A sandbox job that verifies `completion`, or a final Score when none is needed
        (for example: the completion holds no code)."""

    @abstractmethod
    def score(self, task: TaskSpec, job: Job, result: ExecResult) -> Score:
        """Turn the verification job's result into a Score."""

    def demonstration(self, task: TaskSpec) -> str | None:
        """A reference reply to `task` that its verifier passes, for an SFT cold start
        (flows/sft.py); None where the domain keeps no reference (the default)."""
        return None
