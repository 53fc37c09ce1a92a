"""The one way a sandboxed harness reports back: a single line tagged with a nonce.

Every harness that runs model text or user code in the sandbox (the function-writing
harness, `python_tests`, `python_io`, math-verify, reasoning-gym's scorers, user reward
functions, repair's hidden tests) starts with `PRELUDE`. It reads the spec from
stdin and takes the host's fresh nonce out of it before any untrusted code runs. It points
fd 1 at /dev/null, so what that code prints cannot reach the host, and it defines
`report(**result)`, which writes nonce + JSON as one line to a saved copy of stdout and
exits. On the host, `read_tagged` accepts exactly one such line holding a JSON object. A
second line, or a malformed one, is a forgery.

Where the nonce is kept from the code: the function harnesses (`code`, `data`,
`python_tests`) run the solution in a process of its own, started by exec (no copy of the
harness's memory) with only pipes and /dev/null for fds, and decide from the plain values
it sends back (environments/isolated.py). Not done: the other harnesses (`python_io`,
math-verify, reasoning-gym's scorers, user reward functions, repair's hidden tests) still
run the untrusted code in the process that holds the nonce: the nonce lives in `report`'s
closure, not in the module's globals, but code that walks frames or gc could find it. Where
such a verifier keeps the expected answers on the host, a forged line can only claim what
the code could have computed; the audit (environments/audit.py) zeroes code that reaches
there.
"""

from __future__ import annotations

import json
import secrets

from flywheel.environments.sandbox import ExecResult, Job

PRELUDE = r"""
import json, os
def read_all(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
spec = json.loads(read_all(0))
out = os.dup(1)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
def _reporter(nonce):
    def report(**result):
        os.write(out, (nonce + json.dumps(result) + "\n").encode())
        os._exit(0)
    return report
report = _reporter(spec.pop("nonce"))
del _reporter
"""


def new_nonce() -> str:
    """A nonce for a job's spec: unknown to whoever wrote the code the job runs."""
    return secrets.token_hex(16)


def read_tagged_output(nonce: str, result: ExecResult) -> tuple[dict | None, str]:
    """(the harness's report, problem): problem is "" for exactly one well-formed line
    tagged with `nonce`, "forged" for more than one or a malformed one, else why none came
    back."""
    lines = [ln[len(nonce) :] for ln in result.stdout.splitlines() if ln.startswith(nonce)]
    if len(lines) > 1:
        return None, "forged"
    if not lines:  # the code left before the harness could answer
        return None, f"no result from the harness (exit {result.exit_code}): {result.stderr[-300:]}"
    try:
        report = json.loads(lines[0])
    except ValueError:
        return None, "forged"
    return (report, "") if isinstance(report, dict) else (None, "forged")


def read_tagged(job: Job, result: ExecResult) -> tuple[dict | None, str]:
    """`read_tagged_output` for a job whose stdin is its spec (with the nonce)."""
    return read_tagged_output(json.loads(job.stdin)["nonce"], result)
