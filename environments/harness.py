"""The verification harness of the function-writing domains (`code`, `data`), and the
host side that reads its report.

The harness runs in the sandbox next to the candidate's `solution.py`. It gets the hidden
tests' *inputs* only (on stdin, with a per-run nonce), calls the entry function on each
under a per-test alarm, and sends back what it returned: canonical JSON (`call="args"`:
`fn(*args)`) or the returned string itself (`call="text"`: `fn(text)`, which must return
exactly a `str`). The solution's prints go to /dev/null. The expected outputs never enter
the sandbox: each domain compares on the host, so no code the solution runs, however it
tampers with this process, can make a wrong answer compare equal. A second report line
(a forgery) or a malformed one is reported as `forged` (environments/tagged.py: the
same report line for every sandboxed harness).
"""

from __future__ import annotations

import json

from environments.sandbox import ExecResult, Job
from environments.tagged import LOAD_SOLUTION, PRELUDE, new_nonce, read_tagged

# Before the solution loads: the alarm that bounds its import and each test.
_SETUP = r"""
import _signal
inputs, call = spec.pop("inputs"), spec["call"]
def on_alarm(*_):
    raise TimeoutError("test took too long")
_signal.signal(_signal.SIGALRM, on_alarm)
"""
# After it: call `fn` on each input, report outputs (compared on the host).
_RUN = r"""
canonical = json.JSONEncoder(sort_keys=True).encode
outputs, first_error, timed_out = [], "", False
for arg in inputs:
    try:
        _signal.alarm(spec["test_timeout_s"])
        got = fn(*arg) if call == "args" else fn(arg)
        _signal.alarm(0)
        if call == "args":
            got = canonical(got)
        elif type(got) is not str:
            first_error = first_error or f"returned {type(got).__name__}, not str"
            got = None
        outputs.append(got)
    except BaseException as e:
        _signal.alarm(0)
        outputs.append(None)
        first_error = first_error or f"{type(e).__name__}: {e}"[:300]
        if isinstance(e, TimeoutError):
            timed_out = True
            break  # one slow test is enough to know; the rest count as failed
report(outputs=outputs, error=first_error, timed_out=timed_out)
"""
HARNESS = PRELUDE + _SETUP + LOAD_SOLUTION + _RUN


def harness_job(code: str, entry: str, inputs: list, call: str, test_timeout_s: int = 1, **extra) -> Job:
    """A sandbox job running `code` under the harness; `extra` rides along on stdin for
    the host's own use (the solution never sees the spec: the harness pops it first)."""
    spec = {"nonce": new_nonce(), "entry": entry, "inputs": inputs, "call": call,
            "test_timeout_s": test_timeout_s, **extra}  # fmt: skip
    return Job(["python", "-I", "-c", HARNESS], files={"solution.py": code}, stdin=json.dumps(spec))


def read_report(job: Job, result: ExecResult) -> tuple[list, dict, str]:
    """(outputs, the harness's report, problem): problem is "" when exactly one well-formed
    report came back, "forged" for a second or malformed one, else why none came."""
    report, problem = read_tagged(job, result)
    if report is None:
        return [], {}, problem
    if not isinstance(report.get("outputs"), list):
        return [], {}, "forged"
    return report["outputs"], report, ""
