"""The answer kinds: a completion's answer compared with the row's expected one.

On the host, for checks that never execute or evaluate model text (`check_*`):
  exact        the answer, normalised (case, spaces, quotes, a final period), equals one
               of the expected answers;
  numeric      the answer read as a number is within `tolerance` (absolute; default
               1e-6 relative) of the expected number. Numbers are floats: an answer
               beyond float range (1e400, a 400-digit integer) or not finite (inf, nan)
               scores 0 with the reason, an expected answer like that is an `error`
               (a row's answer is refused at load, `Numeric.prepare`), and an
               exponent is bounded before anything is computed from it;
  json_fields  the last JSON object in the completion, field by field (strings
               normalised, numbers within tolerance); reward = share of fields right;
  regex        the answer matches the row's pattern in full. The pattern is the user's:
               a pattern that backtracks badly on some answer stalls the score stage
               (answers are cut to 10,000 characters first).
In the sandbox (`math_job` + `score_math`):
  math         math-verify's parse and verify, inside environments/parsing/safe_parse.guarded():
               its LaTeX path (latex2sympy2's ANTLR parser) builds sympy objects without
               running text, and the plain-expression path's `parse_expr` (which in sympy
               evals) is replaced by one that interprets a whitelist of mathematics and
               never executes, so the completion cannot run code beside the report.
               A completion with code-like text (dunders, imports, eval/exec/sympify
               calls, read after NFKC folding as Python reads identifiers) is also
               refused unread as a suspected hack: a second signal, not the wall.

The answer of the host kinds and of `math`'s refusal check is read from the completion
by `extract_answer` (environments/parsing/final_answer.py): the last <answer>...</answer>,
else the last `Answer:` line, else the last \\boxed{...}, else the last non-empty line.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from flywheel.environments.audit import code_like
from flywheel.environments.base import Score
from flywheel.environments.parsing import safe_parse
from flywheel.environments.parsing.final_answer import extract_answer, normalise
from flywheel.environments.parsing.json_object import check_field, find_last_object
from flywheel.environments.parsing.numbers import finite_number, is_finite_number, parse_number, read_number
from flywheel.environments.sandbox import ExecResult, Job
from flywheel.environments.scoring import tagged_report
from flywheel.environments.tagged import PRELUDE, new_nonce
from flywheel.environments.verifiers.base import RowError, VerifierKind

MAX_ANSWER_CHARS = 10_000


def _graded(ok: bool, error: str = "") -> Score:
    return Score(float(ok), "pass" if ok else "fail", outcome=float(ok), tests_passed=int(ok), tests_total=1,
                 error="" if ok else error)  # fmt: skip


def _answer_or_score(completion: str) -> str | Score:
    got = extract_answer(completion)
    if got is None:
        return Score(0.0, "no_code", tests_total=1, error="no answer in the completion")
    return got[:MAX_ANSWER_CHARS]


def check_exact(expected, completion: str) -> Score:
    got = _answer_or_score(completion)
    if isinstance(got, Score):
        return got
    wanted = expected if isinstance(expected, list) else [expected]
    ok = normalise(got) in {normalise(w) for w in wanted}
    return _graded(ok, f"expected {wanted[0]!r}, got {got[:200]!r}")


def check_numeric(expected, completion: str, tolerance: float | None = None) -> Score:
    want, why = finite_number(expected)
    if want is None:
        return Score(0.0, "error", tests_total=1, error=f"the expected answer {str(expected)[:100]!r}: {why}")
    if tolerance is not None and not (is_finite_number(tolerance) and tolerance >= 0):
        return Score(0.0, "error", tests_total=1, error=f"tolerance {tolerance!r}: not a finite number >= 0")
    got = _answer_or_score(completion)
    if isinstance(got, Score):
        return got
    value, why = read_number(got)
    if value is None:
        return Score(0.0, "fail", tests_total=1, error=f"{why}: {got[:200]!r}")
    tol = tolerance if tolerance is not None else max(1e-9, 1e-6 * abs(want))
    return _graded(abs(value - want) <= tol, f"expected {expected}, got {value}")


def check_json_fields(expected: dict, completion: str, tolerance: float | None = None) -> Score:
    obj = find_last_object(completion)
    if obj is None:
        return Score(0.0, "no_code", tests_total=len(expected), error="no JSON object in the completion")
    right, wrong = 0, []
    for key, want in expected.items():
        if isinstance(want, str):
            ok = check_field({"type": "string", "value": want, "tol": None}, obj.get(key))[0]
        elif isinstance(want, (int, float)) and not isinstance(want, bool):
            ok = check_field({"type": "number", "value": want, "tol": tolerance}, obj.get(key))[0]
        else:
            ok = key in obj and json.dumps(obj[key], sort_keys=True) == json.dumps(want, sort_keys=True)
        right += ok
        if not ok:
            wrong.append(key)
    frac = right / max(1, len(expected))
    return Score(frac, "pass" if not wrong else "fail", outcome=frac, tests_passed=right, tests_total=len(expected),
                 error=f"wrong or missing: {', '.join(wrong)}" if wrong else "")  # fmt: skip


def check_regex(pattern: str, completion: str) -> Score:
    got = _answer_or_score(completion)
    if isinstance(got, Score):
        return got
    return _graded(re.fullmatch(pattern, got.strip(), re.DOTALL) is not None, f"{got[:200]!r} does not match")


# ---- math: math-verify in the sandbox -----------------------------------------------------
# the sandbox cannot import our package: safe_parse.py goes in as text
MATH_HARNESS = (
    PRELUDE
    + Path(safe_parse.__file__).read_text(encoding="utf-8")
    + r"""
try:
    from math_verify import parse, verify
except ImportError as e:
    report(ok=False, infra=True, error=f"math-verify is not importable in the sandbox (sandbox.libraries): {e}")
try:
    with guarded():  # nothing below executes the completion's text (safe_parse.py)
        gold = parse(spec["gold"]) or parse("$" + spec["gold"] + "$")
        if not gold:
            report(ok=False, error="the expected answer does not parse")
        pred = parse(spec["completion"])
        if not pred:
            report(ok=False, parsed=False, error="no answer math-verify could read")
        ok = bool(verify(gold, pred))
    report(ok=ok, parsed=True, error="")
except BaseException as e:
    report(ok=False, error=f"math-verify failed: {type(e).__name__}: {e}"[:300])
"""
)


def math_job(gold: str, completion: str) -> Job | Score:
    if code_like(completion):
        return Score(0.0, "suspected_hack", tests_total=1, error="audit: code-like text in a math answer")
    spec = {"nonce": new_nonce(), "gold": str(gold), "completion": completion[-MAX_ANSWER_CHARS:]}
    return Job(["python", "-I", "-c", MATH_HARNESS], stdin=json.dumps(spec))


def score_math(job: Job, result: ExecResult) -> Score:
    report = tagged_report(job, result, "math-verify")
    if isinstance(report, Score):
        return report
    if report.get("parsed") is False:
        return Score(0.0, "no_code", tests_total=1, error=report.get("error", ""))
    return _graded(bool(report.get("ok")), report.get("error") or "not equivalent to the expected answer")


# ---- the kinds, as task files name them ---------------------------------------------------
class AnswerKind(VerifierKind):
    """A kind whose row holds the expected answer: a row without one is refused, and so is
    an answer no float holds; `answer` keeps it in this kind's form."""

    def prepare(self, answer, tests, entry=None, code=None, presplit=False):
        if answer is None:
            raise RowError(f"verifier {self.name} needs an answer, and the row has none")
        if isinstance(answer, float) and not math.isfinite(answer):
            raise RowError(f"answer is {answer}")
        return self.answer(answer), tests

    def answer(self, answer):
        return str(answer)


class Exact(AnswerKind):
    name, host = "exact", True

    def answer(self, answer):
        return [str(a) for a in answer] if isinstance(answer, list) else str(answer)

    def job(self, spec, completion):
        return check_exact(spec["answer"], completion)


class Numeric(AnswerKind):
    name, host = "numeric", True

    def answer(self, answer):
        try:  # "1e400" parses as a Fraction whose float overflows; a 400-digit int has no float
            value = (
                answer
                if isinstance(answer, (int, float)) and not isinstance(answer, bool)
                else parse_number(str(answer))
            )
            if value is not None and not math.isfinite(float(value)):
                raise OverflowError
        except OverflowError:
            raise RowError(f"answer {str(answer)[:40]!r} is beyond the range of a float") from None
        if value is None:
            raise RowError(f"verifier numeric needs a number, not {answer!r}")
        return value

    def job(self, spec, completion):
        return check_numeric(spec["answer"], completion, spec.get("tolerance"))


class JsonFields(AnswerKind):
    name, host = "json_fields", True

    def answer(self, answer):
        if isinstance(answer, str):
            try:
                answer = json.loads(answer)
            except ValueError:
                pass
        if not isinstance(answer, dict) or not answer:
            raise RowError("verifier json_fields needs an object of expected fields as answer")
        _finite_numbers(answer, "answer")
        return answer

    def job(self, spec, completion):
        return check_json_fields(spec["answer"], completion, spec.get("tolerance"))


def _finite_numbers(value, where: str) -> None:
    """RowError naming the field of a number no float holds (inf, nan, a 400-digit int)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite_numbers(v, f"{where}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            ok = math.isfinite(float(value))
        except OverflowError:
            ok = False
        if not ok:
            raise RowError(f"{where} is a number beyond the range of a float")


class Regex(AnswerKind):
    name, host = "regex", True

    def answer(self, answer):
        try:
            re.compile(str(answer))
        except re.error as exc:
            raise RowError(f"answer is not a valid regular expression: {exc}") from exc
        return str(answer)

    def job(self, spec, completion):
        return check_regex(spec["answer"], completion)


class Math(AnswerKind):
    name = "math"

    def job(self, spec, completion):
        return math_job(spec["answer"], completion)

    def score(self, spec, job, result):
        return score_math(job, result)
