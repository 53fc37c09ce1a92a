"""The verification harness of the function-writing domains (`code`, `data`), and the
host side that reads its report.

The harness runs in the sandbox next to the candidate's `solution.py`. It gets the hidden
tests' *inputs* only (on stdin, with a per-run nonce) and calls the entry function on
each, with a per-test time limit, and sends back what it returned: canonical JSON
(`call="args"`: `fn(*args)`) or the returned string itself (`call="text"`: `fn(text)`,
which must return exactly a `str`). The solution runs in a process of its own
(environments/isolated.py): the harness that holds the nonce only ever sees the plain
values it returned, decoded by a process that never ran the solution, so no override,
patch or frame walk in the solution's process reaches the report. The expected outputs
never enter the sandbox: each domain compares on the host. A second report line (a
forgery) or a malformed one is reported as `forged` (environments/tagged.py: the same
report line for every sandboxed harness).
"""

from __future__ import annotations

import json

from flywheel.environments.isolated import PARENT
from flywheel.environments.sandbox import ExecResult, Job
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged

# Call the entry function in the solution's own process on each input; report the
# outputs (compared on the host).
_RUN = r"""
inputs, call = spec.pop("inputs"), spec["call"]
cand = Candidate(spec["entry"])
try:
    cand.start()
except CandidateFailed as e:
    report(outputs=[], error=str(e))
outputs, first_error, timed_out = [], "", False
for arg in inputs:
    try:
        got = cand.call(arg if call == "args" else [arg], timeout_s=spec["test_timeout_s"])
        if call == "args":
            got = canonical(got)
        elif type(got) is not str:
            first_error = first_error or f"returned {type(got).__name__}, not str"
            got = None
        outputs.append(got)
    except BaseException as e:
        outputs.append(None)
        first_error = first_error or f"{type(e).__name__}: {e}"[:300]
        if getattr(e, "timed_out", False):
            timed_out = True
            break  # one slow test is enough to know; the rest count as failed
cand.kill()
report(outputs=outputs, error=first_error, timed_out=timed_out)
"""
HARNESS = PRELUDE + PARENT + _RUN


def harness_job(code: str, entry: str, inputs: list, call: str, test_timeout_s: int = 1, **extra) -> Job:
    """A sandbox job running `code` under the harness; `extra` rides along on stdin for
    the host's own use (the solution's process never sees the spec)."""
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
