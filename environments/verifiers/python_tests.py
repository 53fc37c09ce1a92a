"""The `python_tests` verifier: assert lines (MBPP's `test_list`) or a HumanEval-style
`check(candidate)`, run against the model's function in the sandbox, never shown in the
prompt.

Tests are split on the host by reading their syntax tree (never by running them):
- every `assert f(<literals>) == <literal>` (or `candidate(...)` inside `check`, or the
  literal on the left) becomes a *case*: only its arguments enter the sandbox, the
  harness sends back what the function returned (canonical JSON), and the host compares
  it with the expected value, which never enters the sandbox, as the code domain does.
  Equality is Python's on the decoded values, as HumanEval's `==` is (2.0 == 2, True ==
  1), except that a tuple and a list with the same items compare equal;
- everything else (asserts on computed values, loops, tolerances) stays in the *rest*:
  it runs as written in the harness's trusted process, with the function under test
  bound to a proxy whose every call crosses to the solution's own process and comes back
  as a plain value (environments/isolated.py), and the helpers the prompt showed (the
  row's `prefix`, e.g. HumanEval/32's `poly`) taken from the prompt, never from the
  completion. So the rest computes on numbers, strings and containers only: a returned
  object cannot override `==`, `-` or `abs`, and nothing the solution does in its process
  reaches the nonce or the report.
Reward = share of cases passed, the rest counting as one more case; `pass` only when
all pass (HumanEval's pass@1 is that verdict; the ladder of verdicts is
environments/scoring.py's). Known difference from running the tests next to the
solution: a test that looks at how the function mutated its arguments, or passes it a
function or another non-plain value, fails.

When the file is read, the kind (`PythonTests.prepare`) refuses tests that do not parse,
name no function, or can never fail a candidate (`never_calls`: no case and no other code
that touches the function, or code that defines that name itself).
"""

from __future__ import annotations

import ast
import json
import re

from flywheel.environments.audit import audit_python
from flywheel.environments.base import Score
from flywheel.environments.isolated import PARENT
from flywheel.environments.parsing.code import extract_code
from flywheel.environments.sandbox import ExecResult, Job
from flywheel.environments.scoring import graded_run
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged
from flywheel.environments.verifiers.base import RowError, VerifierKind

# One definition, used on the host for the expected values and in the harness's trusted
# process for the returned ones (plain values there: the solution's process sent data).
# Exact types only.
CANON = r"""
def canon(x):
    t = type(x)
    if x is None or t in (bool, int, str):
        return x
    if t is float:
        return x if x == x and x not in (float("inf"), float("-inf")) else {"__float__": repr(x)}
    if t in (list, tuple):
        return [canon(v) for v in x]
    if t in (set, frozenset):
        return {"__set__": sorted((canon(v) for v in x), key=repr)}
    if t is dict:
        return {"__dict__": sorted(([canon(k), canon(v)] for k, v in x.items()), key=repr)}
    raise TypeError("returned a " + t.__name__ + ", which is not compared")
"""
_ns: dict = {}
exec(compile(CANON, "<canon>", "exec"), _ns)  # our own constant source, never model text  # noqa: S102
canon = _ns["canon"]

_RUN = r"""
import ast
cand = Candidate(spec["entry"])
try:
    cand.start()
except CandidateFailed as e:
    report(outputs=[], rest_ok=False, error=str(e))
outputs, first_error = [], ""
for source in spec["cases"]:
    try:
        args = ast.literal_eval(source)
        got = json.dumps(canon(cand.call(args, timeout_s=spec["test_timeout_s"])))
    except BaseException as e:
        got = None
        first_error = first_error or f"{type(e).__name__}: {e}"[:300]
    outputs.append(got)
rest_ok = None
if spec["rest"] is not None:
    env = {"__name__": "tests"}
    failures = cand.failures
    try:
        deadline_alarm(spec["rest_timeout_s"])
        limit = _DEADLINE[0]
        try:
            exec(compile(spec["prefix"], "prompt.py", "exec"), env)  # the prompt's helpers: task data
        except Exception as e:
            raise RuntimeError(f"the prompt's code does not run: {type(e).__name__}: {e}") from None
        env[spec["entry"]] = proxy = cand.proxy(limit)
        exec(compile(spec["rest"], "tests.py", "exec"), env)
        if spec["calls_check"]:
            env["check"](proxy)
        deadline_alarm(None)
        # a call that died or hung fails the rest even where the test code caught it
        rest_ok = cand.failures == failures and time.monotonic() < limit
        if not rest_ok:
            first_error = first_error or "the solution's process failed during the tests"
    except BaseException as e:
        deadline_alarm(None)
        rest_ok = False
        first_error = first_error or f"{type(e).__name__}: {e}"[:300]
        cand.timed_out = cand.timed_out or isinstance(e, Overtime)
cand.kill()
report(outputs=outputs, rest_ok=rest_ok, error=first_error, timed_out=cand.timed_out)
"""
HARNESS = PRELUDE + PARENT + CANON + _RUN


class TestsError(ValueError):
    """Tests that cannot be used: they do not parse, or name no function to test."""


def _literal(node: ast.AST):
    return ast.literal_eval(node)  # raises ValueError for anything but a literal


def _case(stmt: ast.stmt, callee: str) -> list | None:
    """[the arguments as a tuple literal's source, the expected value canonical] of
    `assert callee(<literals>) == <literal>`, else None. The arguments travel as source
    (the harness reads them with ast.literal_eval) so tuples, sets and int-keyed dicts
    reach the function as they are written."""
    if not isinstance(stmt, ast.Assert) or not isinstance(stmt.test, ast.Compare):
        return None
    cmp = stmt.test
    if len(cmp.ops) != 1 or not isinstance(cmp.ops[0], ast.Eq):
        return None
    for call, want in ((cmp.left, cmp.comparators[0]), (cmp.comparators[0], cmp.left)):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == callee
            and not call.keywords
        ):
            try:
                for a in call.args:
                    _literal(a)
                return ["(" + "".join(ast.unparse(a) + ", " for a in call.args) + ")", canon(_literal(want))]
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
    return None


def _callee(tree: ast.Module, known: set[str]) -> str | None:
    """The function the asserts test: a name in `known` (the reference's defs) that they
    call, else the non-builtin name they call most."""
    import builtins
    from collections import Counter

    called: Counter = Counter()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assert):
            for sub in ast.walk(stmt.test):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                    called[sub.func.id] += 1
    for name, _ in called.most_common():
        if name in known:
            return name
    return next((n for n, _ in called.most_common() if not hasattr(builtins, n)), None)


def split_tests(tests: str | list[str], entry: str | None = None, reference: str | None = None) -> dict:
    """{"entry", "cases": [[args, expected]], "rest": source or None, "calls_check"}.
    `reference`: a solution's source, whose function names help find the entry point.
    Raises TestsError naming what is wrong."""
    source = "\n".join(tests) if isinstance(tests, list) else str(tests)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise TestsError(f"tests do not parse: {exc}") from exc
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is not None:  # HumanEval: check(candidate) is called with the entry point
        if not entry:
            raise TestsError("tests define check(candidate) but the row names no entry_point")
        param = check.args.args[0].arg if check.args.args else "candidate"
        cases, keep = [], []
        for stmt in check.body:
            case = _case(stmt, param)
            (cases.append(case) if case else keep.append(stmt))
        check.body = keep or [ast.Pass()]
        others = [n for n in tree.body if n is not check]
        trivial = not keep and all(isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign)) for n in others)
        rest = None if trivial else ast.unparse(tree)
        return {"entry": entry, "cases": cases, "rest": rest, "calls_check": rest is not None}
    known = set(re.findall(r"^\s*def\s+(\w+)\s*\(", reference or "", re.MULTILINE))
    entry = entry or _callee(tree, known)
    if not entry:
        raise TestsError("no function call found in the tests")
    cases, keep = [], []
    for stmt in tree.body:
        case = _case(stmt, entry)
        (cases.append(case) if case else keep.append(stmt))
    if not cases and not any(isinstance(n, ast.Assert) for n in ast.walk(ast.Module(keep, []))):
        raise TestsError("the tests hold no assert")
    rest = ast.unparse(ast.Module(keep, [])) if keep else None
    return {"entry": entry, "cases": cases, "rest": rest, "calls_check": False}


def tests_job(split: dict, completion: str, prefix: str = "", test_timeout_s: int = 2) -> Job | Score:
    """`prefix`: code the prompt showed (imports, helpers) that the solution builds on."""
    code = extract_code(completion, split["entry"])
    total = len(split["cases"]) + (split["rest"] is not None)
    if code is None:
        return Score(0.0, "no_code", tests_total=total, error="no code in completion")
    spec = {"nonce": new_nonce(), "entry": split["entry"], "cases": [source for source, _ in split["cases"]],
            "rest": split["rest"], "calls_check": split["calls_check"], "test_timeout_s": test_timeout_s,
            "rest_timeout_s": max(3, test_timeout_s * 3), "prefix": prefix}  # fmt: skip
    files = {"solution.py": (prefix.rstrip() + "\n\n\n" if prefix.strip() else "") + code, "model.py": code}
    return Job(["python", "-I", "-c", HARNESS], files=files, stdin=json.dumps(spec))


def score_tests(split: dict, job: Job, result: ExecResult) -> Score:
    cases = split["cases"]
    total = len(cases) + (split["rest"] is not None)
    findings = audit_python(job.files["model.py"])
    report, problem = read_tagged(job, result)
    outputs = report.get("outputs", []) if report else []
    passed = 0
    for got, (_, want) in zip(outputs, cases):
        try:
            passed += got is not None and json.loads(got) == want
        except (ValueError, TypeError):
            pass
    passed += bool(report and report.get("rest_ok"))
    return graded_run(result, report, problem, findings, passed, total)


def never_calls(split: dict) -> str:
    """Why tests split by python_tests.split_tests cannot fail any candidate, else ""."""
    entry = split["entry"]
    if split["cases"]:  # each case calls the candidate itself
        return ""
    if split["rest"] is None:
        return f"the tests never call {entry}"
    tree = ast.parse(split["rest"])
    if split["calls_check"]:  # HumanEval: check(candidate) must use its parameter
        check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")
        param = check.args.args[0].arg if check.args.args else None
        if param is None or not _reads(check, param):
            return f"the tests' check({param or ''}) never uses the candidate"
        return ""
    for node in tree.body:  # module level: a name the tests bind themselves shadows the candidate
        if entry in _bound(node):
            return f"the tests define {entry} themselves, so the candidate is never called"
    return "" if _reads(tree, entry) else f"the tests never call {entry}"


def _reads(tree: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(tree)
    )


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


class PythonTests(VerifierKind):
    name = "python_tests"
    solution = "function"

    def prepare(self, answer, tests, entry=None, code=None, presplit=False):
        """Tests split into host-compared cases and the rest (`split_tests`); refused when
        they do not parse, name no function, or can never fail a candidate (`never_calls`)."""
        if not presplit:
            if tests is None:
                raise RowError("verifier python_tests needs tests")
            try:
                tests = split_tests(tests, entry, code)
            except TestsError as exc:
                raise RowError(str(exc)) from exc
        why = never_calls(tests)
        if why:
            raise RowError(why)
        return answer, tests

    def job(self, spec, completion):
        return tests_job(spec["tests"], completion, spec.get("prefix", ""))

    def score(self, spec, job, result):
        return score_tests(spec["tests"], job, result)
