"""What a verifier kind is: one small object per value of a task-file row's `verifier`,
found by name in `KINDS` (environments/verifiers/__init__.py). It checks a row's answer
or tests when the file is read (`prepare`), and verifies a completion (`job`, then
`score` for a job that ran in the sandbox). A task file's rows are checked and scored
only through these objects, so a new kind is one class and one entry in the table."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from flywheel.environments.base import Score
from flywheel.environments.sandbox import ExecResult, Job


class RowError(ValueError):
    """A task-file row that cannot be used; the message says why (the row is quarantined)."""


class VerifierKind(ABC):
    name: ClassVar[str]
    host: ClassVar[bool] = False  # verified on the host: never runs or evaluates model text
    # what a completion gives: "answer" (text compared with the row's answer), "function",
    # "program" (code run against the row's tests), or "" (nothing this kind grades)
    solution: ClassVar[str] = "answer"

    def prepare(self, answer, tests, entry: str | None = None, code: str | None = None,
                presplit: bool = False) -> tuple[object, object]:  # fmt: skip
        """The row's (answer, tests) as this kind keeps them, or RowError naming what is
        wrong. `entry`: the row's entry_point; `code`: a solution's source that helps find
        it; `presplit`: the tests are split already (MBPP's, split to name its function)."""
        return answer, tests

    @abstractmethod
    def job(self, spec: dict, completion: str) -> Job | Score:
        """The sandbox job that verifies `completion`, or its Score when nothing runs.
        `spec`: the task's verifier data (kind, answer, tests, tolerance, prefix, ...)."""

    def score(self, spec: dict, job: Job, result: ExecResult) -> Score:
        """The Score of the job's result (kinds whose `job` runs in the sandbox)."""
        raise TypeError(f"verifier {self.name} runs nothing in the sandbox")


class NoVerifier(VerifierKind):
    """`none`: the row is scored by `reward.functions` (and the judge) alone."""

    name = "none"
    solution = ""

    def job(self, spec, completion):
        return Score(0.0, "fail", graded=False)
