"""The `python_io` kind: the row's program runs once per case, on the case's stdin, in the
sandbox; its stdout is compared on the host with the expected output (trailing spaces
and blank lines aside). Only the inputs enter the sandbox. The program may read and
write its own streams and leave with exit(); anything else the audit finds zeroes the
reward (environments/audit.py), and the verdict comes from the one ladder
(environments/scoring.py). Not done: the program runs in the process that holds the
report's nonce (environments/tagged.py says what that leaves open)."""

from __future__ import annotations

import json

from flywheel.environments.audit import audit_python
from flywheel.environments.base import Score
from flywheel.environments.parsing.code import extract_code
from flywheel.environments.sandbox import ExecResult, Job
from flywheel.environments.scoring import graded_run
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged
from flywheel.environments.verifiers.base import RowError, VerifierKind

IO_HARNESS = (
    PRELUDE
    + r"""
import io, sys, _signal
def on_alarm(*_):
    raise TimeoutError("case took too long")
_signal.signal(_signal.SIGALRM, on_alarm)
fd = os.open("solution.py", os.O_RDONLY)
try:
    code = compile(read_all(fd), "solution.py", "exec")
except BaseException as e:
    report(outputs=[], error=f"solution does not compile: {type(e).__name__}: {e}"[:300])
outputs, first_error = [], ""
for text in spec["inputs"]:
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8")
    sys.stdout = buf = io.StringIO()
    try:
        _signal.alarm(spec["case_timeout_s"])
        exec(code, {"__name__": "__main__"})
    except SystemExit:
        pass
    except BaseException as e:
        first_error = first_error or f"{type(e).__name__}: {e}"[:300]
    finally:
        _signal.alarm(0)
    outputs.append(buf.getvalue()[-65536:])
report(outputs=outputs, error=first_error)
"""
)
# what a stdin/stdout program does that a pure function must not: read and write its own
# streams, and leave with exit()
IO_ALLOWED = ("uses sys.stdin", "uses sys.stdout", "uses sys.exit", "uses exit", "uses quit", "imports sys.stdin",
              "imports sys.stdout", "imports sys.exit")  # fmt: skip


def io_job(completion: str, inputs: list[str], case_timeout_s: int = 2) -> Job | Score:
    code = extract_code(completion, "main")
    if not code or not code.strip():
        return Score(0.0, "no_code", tests_total=len(inputs), error="no code in completion")
    spec = {"nonce": new_nonce(), "inputs": inputs, "case_timeout_s": case_timeout_s}
    return Job(["python", "-I", "-c", IO_HARNESS], files={"solution.py": code}, stdin=json.dumps(spec))


def _lines(text: str) -> list[str]:
    out = [ln.rstrip() for ln in str(text).splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


def score_io(job: Job, result: ExecResult, expected: list[str]) -> Score:
    total = len(expected)
    findings = [f for f in audit_python(job.files["solution.py"]) if not f.startswith(IO_ALLOWED)]
    report, problem = read_tagged(job, result)
    outputs = report.get("outputs", []) if report else []
    passed = sum(isinstance(got, str) and _lines(got) == _lines(want) for got, want in zip(outputs, expected))
    return graded_run(result, report, problem, findings, passed, total)


class PythonIO(VerifierKind):
    name = "python_io"
    solution = "program"

    def prepare(self, answer, tests, entry=None, code=None, presplit=False):
        if not isinstance(tests, list) or not tests or not all(
            isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str) for t in tests):  # fmt: skip
            raise RowError("verifier python_io needs tests: a list of {input: text, output: text}")
        return answer, tests

    def job(self, spec, completion):
        return io_job(completion, [t["input"] for t in spec["tests"]])

    def score(self, spec, job, result):
        return score_io(job, result, [t["output"] for t in spec["tests"]])
