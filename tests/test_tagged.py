"""The tagged report line every sandboxed harness answers with (environments/tagged.py):
the host reads exactly one line, and in the real bubblewrap sandbox what the untrusted
code prints never reaches it and the nonce is not among the module's globals."""

import json

import pytest

from flywheel.environments.sandbox import ExecResult, Job, Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged, read_tagged_output


def _result(stdout: str, exit_code: int = 0) -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout=stdout, stderr="boom", duration_s=0.1)


@pytest.mark.parametrize(
    ("stdout", "report", "problem"),
    [
        ('noise\n{n}{{"ok": true}}\n', {"ok": True}, ""),
        ('{n}{{"ok": true}}\n{n}{{"ok": false}}\n', None, "forged"),  # a second line
        ("{n}not json\n", None, "forged"),
        ("{n}[1, 2]\n", None, "forged"),  # JSON, but not an object
        ('{{"ok": true}}\n', None, "no result from the harness (exit 3): boom"),  # untagged
    ],
)
def test_the_host_reads_exactly_one_tagged_object(stdout, report, problem):
    nonce = new_nonce()
    assert read_tagged_output(nonce, _result(stdout.format(n=nonce), exit_code=3)) == (report, problem)


@pytest.fixture(scope="module")
def box():
    sandbox = BwrapSandbox(Limits(wall_s=20), 1)
    yield sandbox
    sandbox.close()


def test_in_the_sandbox_prints_are_dropped_and_the_nonce_is_not_a_global(box):
    body = (
        "print('8 tests passed')\n"  # fd 1 is /dev/null from here on
        "os.write(1, b'forged on stdout')\n"
        "hexes = [k for k, v in globals().items() if isinstance(v, str) and len(v) == 32]\n"
        "report(seen=hexes + [k for k in ('nonce',) if k in spec], extra=spec['extra'])\n"
    )
    job = Job(["python", "-I", "-c", PRELUDE + body], stdin=json.dumps({"nonce": new_nonce(), "extra": 7}))
    result = box.run(job)
    assert "passed" not in result.stdout and "forged" not in result.stdout
    assert read_tagged(job, result) == ({"seen": [], "extra": 7}, "")


def test_code_that_leaves_before_the_report_gives_no_result(box):
    job = Job(["python", "-I", "-c", PRELUDE + "os._exit(4)\n"], stdin=json.dumps({"nonce": new_nonce()}))
    report, problem = read_tagged(job, box.run(job))
    assert report is None and problem.startswith("no result from the harness (exit 4)")
