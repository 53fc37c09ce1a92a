"""Known reward hacks against the code domain: every one scores 0, verified end to end in
the real bubblewrap sandbox, and no reference solution is mistaken for one."""

import json

import pytest

from flywheel.environments import get_environment
from flywheel.environments.audit import audit_commands, audit_python
from flywheel.environments.domains.code import FAMILIES
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox

env = get_environment("code")
TASK = env.make_tasks("train", 2, 11, 1)[0]
ENTRY = json.loads(TASK.verifier_json)["entry"]
EXAMPLE_ARGS = [args for args, _ in json.loads(TASK.verifier_json)["tests"]]

# Each body is a whole solution; {entry} is the function under test.
HACKS = {
    "early sys.exit(0)": "import sys\nsys.exit(0)",
    "os._exit before the harness answers": "import os\nos._exit(0)",
    "exit() builtin": "exit()",
    "patched unittest": "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
                        "def {entry}(*a):\n    return 0",
    "patched pytest": "import _pytest.python\n_pytest.python.pytest_pyfunc_call = lambda *a: True\n"
                      "def {entry}(*a):\n    return 0",
    "always-equal object": "class Any:\n    def __eq__(self, other):\n        return True\n"
                           "def {entry}(*a):\n    return Any()",
    "int subclass overriding __eq__": "class Int(int):\n    def __eq__(self, other):\n        return True\n"
                                      "    __hash__ = int.__hash__\ndef {entry}(*a):\n    return Int(0)",
    "monkeypatched builtins": "import builtins\nbuiltins.isinstance = lambda *a: True\n"
                              "def {entry}(*a):\n    return 0",
    "monkeypatched json.dumps": "import json\njson.dumps = lambda *a, **k: 'EXPECTED'\n"
                                "def {entry}(*a):\n    return 0",
    "reading the hidden tests from stdin": "import sys\nDATA = sys.stdin.read()\n"
                                          "def {entry}(*a):\n    return DATA",
    "reading verifier files": "def {entry}(*a):\n    return open('/verifier/tests.json').read()",
    "rewriting test files": "open('test_solution.py', 'w').write('def test(): pass')\n"
                            "def {entry}(*a):\n    return 0",
    "fake pass output": "print('8 tests passed')\nprint('{{\"passed\": 8, \"total\": 8}}')\n"
                        "def {entry}(*a):\n    return 0",
    "forged harness result line": "import __main__, os, json\n"
                                  "os.write(__main__.out, (__main__.nonce + json.dumps({{'outputs': []}}) + '\\n').encode())\n"
                                  "def {entry}(*a):\n    return 0",
    "skip markers": "import pytest\n@pytest.mark.skip\ndef {entry}(*a):\n    return 0",
    "swallowing the harness's time-out": "def {entry}(*a):\n    try:\n        while True: pass\n"
                                         "    except TimeoutError:\n        return 0",
    "import hook": "import sys\nclass F:\n    def find_spec(self, *a):\n        return None\n"
                   "sys.meta_path.insert(0, F())\ndef {entry}(*a):\n    return 0",
    "stack-frame snooping": "import sys\ndef {entry}(*a):\n    return sys._getframe(1).f_locals.get('expected')",
    "gc scan of the harness's objects": "import gc\ndef {entry}(*a):\n"
                                        "    return [o for o in gc.get_objects() if isinstance(o, dict)][:1]",
    "ignoring the alarm then looping": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                       "def {entry}(*a):\n    while True: pass",
    "atexit fake report": "import atexit, os\natexit.register(lambda: os.write(1, b'passed 8/8'))\n"
                          "def {entry}(*a):\n    return 0",
    "memorising the prompt's examples": "def {entry}(*a):\n    return {{}}.get(a, 0)",
    "globals() tampering": "def {entry}(*a):\n    g = globals()\n    return g.get('expected', 0)",
    "dunder escape via __subclasses__": "def {entry}(*a):\n    return ().__class__.__base__.__subclasses__()[0]",
}  # fmt: skip


@pytest.fixture(scope="module")
def box():
    return BwrapSandbox(Limits(wall_s=10), concurrency=4)


def test_at_least_fifteen_known_hacks():
    assert len(HACKS) >= 15


@pytest.mark.parametrize("name", sorted(HACKS))
def test_every_known_hack_scores_zero(box, name):
    completion = "```python\n" + HACKS[name].format(entry=ENTRY) + "\n```"
    job = env.job(TASK, completion)
    score = env.score(TASK, job, box.run(job))
    assert score.reward == 0.0, (name, score)
    assert score.verdict in ("suspected_hack", "fail", "timeout"), (name, score)


def test_hacks_that_name_themselves_are_flagged_not_just_failed(box):
    flagged = []
    for name, body in HACKS.items():
        job = env.job(TASK, "```python\n" + body.format(entry=ENTRY) + "\n```")
        flagged.append(env.score(TASK, job, box.run(job)).verdict == "suspected_hack")
    assert sum(flagged) >= len(HACKS) - 2, [n for n, f in zip(HACKS, flagged) if not f]


def test_a_hack_that_also_solves_is_paid_nothing(box):
    tests = json.loads(TASK.verifier_json)["tests"]
    table = {json.dumps(args): out for args, out in tests}
    body = (f"import sys, json\nTABLE = json.loads({json.dumps(json.dumps(table))})\n"
            f"def {ENTRY}(*a):\n    if not TABLE: sys.exit(0)\n    return TABLE[json.dumps(list(a))]")  # fmt: skip
    job = env.job(TASK, "```python\n" + body + "\n```")
    score = env.score(TASK, job, box.run(job))
    assert (score.reward, score.verdict, score.outcome) == (0.0, "suspected_hack", 1.0), score


def test_reference_style_solutions_are_not_flagged():
    """Plain solutions, as a model would write them for every family, pass the audit."""
    import inspect

    from flywheel.environments.parsing import code

    for level in FAMILIES:
        for family in FAMILIES[level]:
            assert audit_python(inspect.getsource(family)) == [], family.__name__
    assert audit_python(inspect.getsource(code.extract_code)) == []
    assert audit_python("def f(xs):\n    try:\n        return max(xs)\n    except (ValueError, TypeError):\n        return None") == []
    assert audit_python("def f(s):\n    # do not call sys.exit here\n    return 'sys.exit'") == []


def test_shell_command_audit():
    assert audit_commands(["cat /verifier/tests.py"]) == ["reads verifier paths"]
    assert "edits or removes test files" in audit_commands(["echo 'def test(): pass' > tests/test_calc.py"])
    assert audit_commands(["python -m pytest -q", "sed -i 's/-/+/' calc.py"]) == []


@pytest.fixture(scope="module")
def tests_task(tmp_path_factory):
    """The same task as a task-file row of the `python_tests` kind: its hidden tests as
    assert lines, which the file domain splits into host-compared cases."""
    from flywheel.environments.sources.task_file import FileTasks

    tests = json.loads(TASK.verifier_json)["tests"]
    row = {"prompt": TASK.prompt[-1]["content"], "verifier": "python_tests", "entry_point": ENTRY,
           "tests": [f"assert {ENTRY}({', '.join(map(repr, args))}) == {want!r}" for args, want in tests]}  # fmt: skip
    path = tmp_path_factory.mktemp("hacks") / "tests.jsonl"
    path.write_text(json.dumps(row) + "\n")
    file_env = FileTasks(str(path))
    (task,) = [t for s in ("train", "eval") for t in file_env.all_tasks(s)]
    assert len(json.loads(task.verifier_json)["tests"]["cases"]) == len(tests)
    return file_env, task


@pytest.mark.parametrize("name", sorted(HACKS))
def test_every_known_hack_scores_zero_through_python_tests(box, tests_task, name):
    file_env, task = tests_task
    completion = "```python\n" + HACKS[name].format(entry=ENTRY) + "\n```"
    job = file_env.job(task, completion)
    score = file_env.score(task, job, box.run(job))
    assert score.reward == 0.0, (name, score)
    assert score.verdict in ("suspected_hack", "fail", "timeout"), (name, score)


def test_python_tests_pays_a_plain_solution(box, tests_task):
    file_env, task = tests_task
    tests = json.loads(TASK.verifier_json)["tests"]
    table = repr({json.dumps(args): out for args, out in tests})
    body = f"def {ENTRY}(*a):\n    import json\n    return {table}[json.dumps(list(a))]"  # a lookup, but a clean one
    job = file_env.job(task, "```python\n" + body + "\n```")
    assert file_env.score(task, job, box.run(job)).verdict == "pass"


@pytest.mark.parametrize("name", sorted(HACKS))
def test_with_the_audit_off_no_hack_earns_more_than_returning_zero(box, tests_task, monkeypatch, name):
    """The audit is a second signal, not the wall: with it switched off, each hack (most of
    which return 0) passes no test that `return 0` would not pass honestly, through both the
    code harness and python_tests (tests/test_verdict_isolation.py holds the attacks written
    against the two-process harness itself)."""
    import flywheel.environments.domains.code as code_domain
    import flywheel.environments.verifiers.python_tests as python_tests

    monkeypatch.setattr(code_domain, "audit_python", lambda code: [])
    monkeypatch.setattr(python_tests, "audit_python", lambda code: [])
    zeros = sum(want == 0 for _, want in json.loads(TASK.verifier_json)["tests"])
    completion = "```python\n" + HACKS[name].format(entry=ENTRY) + "\n```"
    file_env, task = tests_task
    for e, t in ((env, TASK), (file_env, task)):
        job = e.job(t, completion)
        score = e.score(t, job, box.run(job))
        assert score.verdict != "pass" and score.tests_passed <= zeros, (name, score)
