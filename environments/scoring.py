"""From what a verifier saw to a Score: the one ladder a sandboxed test harness's run
climbs, the one reward clip and the one format penalty.

`graded_run` is the ladder for a harness run of `total` tests. The `code` and `data`
domains and the `python_tests` and `python_io` kinds all go through it, rung by rung:
  1. the sandbox broke (`result.error`)                      -> error;
  2. the audit found something, or the report line was forged -> suspected_hack: reward
     0, the share that passed kept as the outcome and charged as the penalty, so a
     policy is never paid for trying;
  3. the job ran out of time                                  -> timeout;
  4. no report came back                                      -> fail, saying why;
  5. the share of tests passed: pass when all pass, else timeout when the harness
     stopped on a slow test, else fail; reward = clip(outcome + penalty).
The audit is not run here. Each verifier runs it on the code it sent and passes its
findings in, so each stays the place where the audit is called (and where tests switch
it off). `tagged_report` is the shorter ladder of a harness that answers once
(math-verify, reasoning-gym's scorers): the report, or the Score when there is none.

Reward clip: a domain's reward stays in [-1, 1] (`clip_reward`). The trainer keeps a
guard of its own against broken values (policy/grpo.py `finite_reward`, +-100); that
guard is not this clip.
Format penalty: -0.1 when an answer earned something but broke the format its prompt
stated (math's answer line, data's ```python block, extraction's JSON numbers). It is
charged only on credit, so a sloppy answer never ranks below no answer.
"""

from __future__ import annotations

from flywheel.environments.base import Score
from flywheel.environments.sandbox import ExecResult, Job
from flywheel.environments.tagged import read_tagged

FORMAT_PENALTY = -0.1


def clip_reward(value: float) -> float:
    """A domain's reward, kept in [-1, 1]."""
    return max(-1.0, min(1.0, value))


def format_penalty(outcome: float, kept: bool) -> float:
    """FORMAT_PENALTY when the answer earned something (`outcome` > 0) but did not keep
    the stated format, else 0."""
    return FORMAT_PENALTY if outcome > 0 and not kept else 0.0


def graded_run(result: ExecResult, report: dict | None, problem: str, findings: list[str], passed: int, total: int,
               *, penalty: float = 0.0, error: str | None = None) -> Score:  # fmt: skip
    """The verdict on a harness run of `total` tests, `passed` of which passed. `report`
    and `problem` come from reading the harness's tagged line (problem "" when one
    well-formed line came back, "forged" for a forgery); `findings`: the audit's on the
    code; `penalty`: the format penalty, if the domain charges one; `error`: the text of
    the final Score (default: the harness's first error)."""
    if result.error:
        return Score(0.0, "error", tests_total=total, error=result.error)
    outcome = passed / max(1, total)
    if findings or problem == "forged":
        why = "; ".join(findings) or "a forged or malformed result line"
        return Score(0.0, "suspected_hack", outcome=outcome, penalty=-outcome, tests_passed=passed, tests_total=total,
                     error="audit: " + why)  # fmt: skip
    if result.timed_out:
        return Score(0.0, "timeout", tests_total=total, error="verification timed out")
    if problem:
        return Score(0.0, "fail", tests_total=total, error=problem)
    verdict = "pass" if passed == total else "timeout" if report.get("timed_out") else "fail"
    return Score(clip_reward(outcome + penalty), verdict, outcome=outcome, penalty=penalty, tests_passed=passed,
                 tests_total=total, error=str(report.get("error", "")) if error is None else error)  # fmt: skip


def tagged_report(job: Job, result: ExecResult, what: str) -> dict | Score:
    """The harness's report, or the Score when there is none to read: the sandbox broke,
    the job timed out, a line was forged, or the harness says its library is missing."""
    if result.error:
        return Score(0.0, "error", tests_total=1, error=result.error)
    if result.timed_out:
        return Score(0.0, "timeout", tests_total=1, error=f"{what} timed out")
    report, problem = read_tagged(job, result)
    if problem == "forged":
        return Score(0.0, "suspected_hack", tests_total=1, error="audit: a forged or malformed result line")
    if report is None:
        return Score(0.0, "error", tests_total=1, error=f"{what}: {problem}")
    if report.get("infra"):
        return Score(0.0, "error", tests_total=1, error=report.get("error", ""))
    return report
