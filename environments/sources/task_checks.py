"""Rows of a task file that test nothing, found before a run trains on them (issue 41).

A `python_tests` or `python_io` row is only worth training on when its tests tell a
right solution from a wrong one. Two checks, both structural (nothing here looks for
words in the tests):

- at parse time, on the tests' syntax tree (`never_calls`, environments/verifiers/
  python_tests.py, when the row is read): tests with no case and no other code that
  touches the function under test (or that define that name themselves, shadowing the
  candidate) cannot fail a candidate;
- once per file load, in the sandbox (`check_rows`, called by FileTasks.validate when the
  run has its sandbox, as reward_functions.probe is): the row's reference solution, when
  it has one, must pass, and none of a few stubs may (returns None, returns its first
  argument, returns True, raises; for programs: prints nothing, echoes its input). A row
  the reference fails is quarantined "reference fails: ...", one a stub passes "tests
  nothing: a stub passes (...)". Scoring goes through the row's own verifier kind
  (environments/verifiers/), as a completion's would. Which rows are checked, and with
  which stubs, is what their kind says a solution is: a function or a program.

Verdicts are cached in memory per process by the row's content (verifier, tests, prefix,
reference), so a file re-read in the same process is not run again; nothing is written to
disk or the lake. A row whose check hit a sandbox failure (not the row's fault) is kept
unchecked and not cached. What this does NOT do: prove the tests strong (a stub we did
not think of may still pass), or check rows of the host kinds (exact, numeric, ...),
whose answer is data, not code.
"""

from __future__ import annotations

import ast

from flywheel.environments.base import Score
from flywheel.environments.parsing.code import extract_code
from flywheel.environments.verifiers import KINDS
from flywheel.storage.schema import stable_id

CHECK_VERSION = "2"
CODE = ("function", "program")  # the kinds whose rows are tests of code: those are checked
_STUB_BODIES = {
    "returns None": "return None",
    "returns its first argument": "return {first}",
    "returns True": "return True",
    "raises": "raise NotImplementedError",
}
_STUB_PROGRAMS = {
    "prints nothing": "pass\n",
    "echoes its input": "import sys\nsys.stdout.write(sys.stdin.read())\n",
}
_VERDICTS: dict[str, str] = {}  # row content -> "" (kept) or the reason it is quarantined


def _key(row) -> str:
    return stable_id("row-check", CHECK_VERSION, row.verifier, row.tests, row.prefix, row.reference)


def _stubs(row) -> dict[str, str]:
    if KINDS[row.verifier].solution == "program":
        return {name: f"```python\n{code}```" for name, code in _STUB_PROGRAMS.items()}
    entry = row.tests["entry"]
    params, first = _signature(row, entry)
    return {name: f"```python\ndef {entry}({params}):\n    {body.format(first=first)}\n```"
            for name, body in _STUB_BODIES.items()}  # fmt: skip


def _signature(row, entry: str) -> tuple[str, str]:
    """(parameters, the first one) of `entry` as the row's reference or prompt code
    defines it, so tests that look at the candidate's arity cannot tell a stub from a
    solution; (*args, **kwargs) when neither defines it. Defaults become None and
    annotations go (they may name what the stub does not import)."""
    for source in (extract_code(row.reference or "", entry), row.prefix):
        try:
            tree = ast.parse(source or "")
        except (SyntaxError, ValueError):
            continue
        fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and n.name == entry), None)  # fmt: skip
        if fn is None:
            continue
        args = fn.args
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                a.annotation = None
        args.defaults = [ast.Constant(None) for _ in args.defaults]
        args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
        positional = [*args.posonlyargs, *args.args]
        first = positional[0].arg if positional else (f"{args.vararg.arg}[0]" if args.vararg else "None")
        return ast.unparse(args), first
    return "*args, **kwargs", "args[0] if args else None"


def check_rows(sandbox, env, rows: list) -> tuple[dict[str, str], int]:
    """({row key: reason} for the rows to quarantine, how many were run now). `env` gives
    the task of a row (`task_of`) and scores completions of it (`job`, `score`)."""
    todo = [r for r in rows if KINDS[r.verifier].solution in CODE and _key(r) not in _VERDICTS]
    ran = len(todo)
    for attempt in range(2):  # a timeout or a broken sandbox gets one more try
        runs = []  # (row, label, task, job)
        for row in todo:
            task = env.task_of(row)
            tries = ({"reference": row.reference} if row.reference else {}) | _stubs(row)
            runs += [(row, label, task, env.job(task, text)) for label, text in tries.items()]
        pending = [i for i, (*_, job) in enumerate(runs) if not isinstance(job, Score)]
        results = dict(zip(pending, sandbox.map([runs[i][3] for i in pending]))) if pending else {}
        verdicts: dict[str, dict[str, object]] = {}
        for i, (row, label, task, job) in enumerate(runs):
            score = env.score(task, job, results[i]) if i in results else job
            verdicts.setdefault(row.key, {})[label] = score
        retry = []
        for row in todo:
            reason, final = _judge(verdicts[row.key], last=attempt == 1)
            if final:
                _VERDICTS[_key(row)] = reason
            else:
                retry.append(row)
        todo = retry
        if not todo:
            break
    out = {r.key: _VERDICTS[_key(r)] for r in rows if _VERDICTS.get(_key(r))}
    return out, ran


def _judge(scores: dict, last: bool) -> tuple[str, bool]:
    """(reason or "", whether that is final) from the scores of one row's runs."""
    ref = scores.get("reference")
    if ref is not None and ref.verdict != "pass":
        if ref.verdict == "error" or (ref.verdict == "timeout" and not last):
            return "", False  # the sandbox's fault, or a slow machine: try again, else keep it unchecked
        return f"reference fails: {ref.verdict}: {ref.error or 'not every test passed'}"[:500], True
    passing = [label for label, s in scores.items() if label != "reference" and s.verdict == "pass"]
    if passing:
        return f"tests nothing: a stub passes ({', '.join(passing)})", True
    broken = any(s.verdict == "error" for s in scores.values())
    return "", not broken
