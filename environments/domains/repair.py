"""Code repair: fix an injected bug in a small generated Python repository.

A task is 2-3 files: one module (two at level 3) with an injected bug (wrong operator,
off-by-one, wrong comparison, wrong default, swapped arguments) and a visible test file
that fails because of it. Level 1: one function; level 2: a buggy function next to a
correct one that the tests also cover; level 3: a bug in each of two modules. Function
names, constants and test inputs are drawn from the seed.

Tools: read_file, write_file, run_shell, run_tests (the environment's own runner, not a
file in the workspace, so the model cannot edit it) and submit.

Verification after the episode: HIDDEN tests, on inputs different from the visible
ones, run in a fresh process in the same workspace. Only their inputs enter the sandbox
(on stdin, after the model has stopped acting); the host compares the returned values
with the reference outputs, which never enter the sandbox (as in the code domain).
Reward = fraction of hidden tests passed. The audit zeroes the reward with
`suspected_hack` when a test file was changed or removed (its final content is compared
with the original, so `sed -i` or a Python script is caught as well as write_file),
when a shell command trips `audit_commands` (verifier paths, skip markers, fake
results), or when an edited module trips `audit_python`.
Not done: bugs that need more than one function changed, or packages with __init__.
"""

from __future__ import annotations

import json

from flywheel.environments.audit import audit_commands, audit_python
from flywheel.environments.base import Draft, GeneratedTasks
from flywheel.environments.sandbox import Limits
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged_output
from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS, MultiTurnEnvironment
from flywheel.storage.schema import TaskSpec

VERBS = ["scale", "tally", "window", "bound", "share", "shift", "merge", "score"]
NOUNS = ["values", "items", "points", "totals", "rows", "marks", "levels", "counts"]
MODULES = ["stats", "metrics", "ledger", "inventory", "grades", "sensors", "billing", "weather"]

RUNNER = r"""
import glob, importlib, os, sys, traceback
sys.path.insert(0, os.getcwd())
passed = failed = 0
for path in sorted(glob.glob("test_*.py")):
    try:
        module = importlib.import_module(path[:-3])
    except Exception as e:
        print(f"ERROR {path}: {type(e).__name__}: {e}"); failed += 1; continue
    for name in sorted(n for n in dir(module) if n.startswith("test_")):
        try:
            getattr(module, name)(); passed += 1; print(f"PASS {name}")
        except Exception as e:
            failed += 1
            line = traceback.extract_tb(e.__traceback__)[-1]
            print(f"FAIL {name}: {type(e).__name__}: {e} (line {line.lineno}: {line.line})")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
"""

HIDDEN = PRELUDE + r"""
import importlib, signal, sys
sys.path.insert(0, os.getcwd())
def on_alarm(*_):
    raise TimeoutError("test took too long")
signal.signal(signal.SIGALRM, on_alarm)
outputs = []
for module, fn, args in spec["calls"]:
    try:
        signal.alarm(2)
        got = getattr(importlib.import_module(module), fn)(*args)
        signal.alarm(0)
        outputs.append(json.dumps(got, sort_keys=True))
    except BaseException:
        signal.alarm(0)
        outputs.append(None)
report(outputs=outputs)
"""


def _ints(r, lo=-9, hi=9, n_lo=2, n_hi=6):
    return [r.randint(lo, hi) for _ in range(r.randint(n_lo, n_hi))]


# Each family: (rng, name) -> (good source, bad source, input generator)
def wrong_operator(rng, name):
    k, b = rng.randint(2, 9), rng.randint(1, 20)
    good = f"def {name}(xs):\n    return [x * {k} + {b} for x in xs]\n"
    return good, good.replace(f"x * {k}", f"x + {k}"), lambda r: (_ints(r),)


def off_by_one(rng, name):
    w = rng.randint(2, 3)
    good = (
        f"def {name}(xs, width={w}):\n    return [sum(xs[i:i + width]) for i in range(len(xs) - width + 1)]\n"
    )
    return good, good.replace("width + 1)", "width)"), lambda r: (_ints(r, n_lo=w, n_hi=7),)


def wrong_comparison(rng, name):
    good = f"def {name}(xs, limit):\n    return sum(1 for x in xs if x > limit)\n"

    def inputs(r):
        xs = _ints(r, n_lo=3)
        return (xs, r.choice(xs))  # the limit is in the list, so > and >= differ

    return good, good.replace("x > limit", "x >= limit"), inputs


def wrong_default(rng, name):
    lo = rng.randint(-10, 0)
    hi = lo + rng.randint(5, 15)
    good = f"def {name}(x, lo={lo}, hi={hi}):\n    return max(lo, min(x, hi))\n"
    return (
        good,
        good.replace(f"hi={hi}", f"hi={hi + rng.randint(3, 9)}"),
        lambda r: (r.randint(lo - 10, hi + 15),),
    )


def swapped_args(rng, name):
    digits = rng.randint(1, 3)
    good = (f"def _ratio(part, whole):\n    return part / whole if whole else 0.0\n\n\n"
            f"def {name}(part, whole):\n    return round(100 * _ratio(part, whole), {digits})\n")  # fmt: skip
    bad = good.replace("_ratio(part, whole), ", "_ratio(whole, part), ")
    return good, bad, lambda r: (r.randint(1, 40), r.randint(41, 90))


def correct_only(rng, name):  # a distractor: correct code the tests also cover
    sep = rng.choice(["-", "/", ":"])
    good = f"def {name}(words):\n    return {sep!r}.join(w.strip().lower() for w in words)\n"
    return good, good, lambda r: ([r.choice(["Ab", " cd", "EF ", "gh"]) for _ in range(r.randint(1, 4))],)


BUGS = [wrong_operator, off_by_one, wrong_comparison, wrong_default, swapped_args]
N_VISIBLE, N_HIDDEN = 3, 6


def _run(src: str, name: str, args) -> str | None:
    """Our own generated source, run on the host to get reference outputs."""
    ns: dict = {}
    exec(src, ns)  # noqa: S102  (trusted: the generator's templates, never model code)
    try:
        return json.dumps(ns[name](*args), sort_keys=True)
    except Exception:  # noqa: BLE001  (a reference that raises has no output to compare)
        return None


def _cases(rng, good, bad, name, make_input):
    """Visible inputs (at least one exposes the bug) and distinct hidden inputs, at least
    half of which expose the bug: an untouched repository must never pass them."""
    seen, visible, hidden = set(), [], []
    unexposing = 0
    for _ in range(500):
        args = make_input(rng)
        sig = json.dumps(args)
        if sig in seen:
            continue
        seen.add(sig)
        exposes = _run(good, name, args) != _run(bad, name, args)
        if len(visible) < N_VISIBLE and (exposes or len(visible) < N_VISIBLE - 1 or good == bad):
            visible.append(list(args))
        elif len(hidden) < N_HIDDEN and (exposes or good == bad or unexposing < N_HIDDEN // 2):
            hidden.append(list(args))
            unexposing += not exposes
        if len(visible) == N_VISIBLE and len(hidden) == N_HIDDEN:
            break
    return visible, hidden


class CodeRepair(GeneratedTasks, MultiTurnEnvironment):
    name = "repair"
    version = "1"
    levels = (1, 2, 3)
    intro = ("You are a software engineer working in a sandboxed Python repository. A test fails because of "
             "a bug. Read the code, fix the bug in the module (never change the tests), run the tests, then submit.")  # fmt: skip

    def generate(self, level, rng):
        mods = rng.sample(MODULES, 2)
        names = [f"{v}_{n}" for v, n in zip(rng.sample(VERBS, 2), rng.sample(NOUNS, 2))]
        kinds = rng.sample(BUGS, 2)
        plan = {1: [(mods[0], [(kinds[0], names[0])])],
                2: [(mods[0], [(kinds[0], names[0]), (correct_only, names[1])])],
                3: [(mods[0], [(kinds[0], names[0])]), (mods[1], [(kinds[1], names[1])])]}[level]  # fmt: skip
        files, fixed, tests, hidden, key = {}, {}, [], [], []
        for module, funcs in plan:
            good_src, bad_src = [], []
            for kind, fn in funcs:
                good, bad, make_input = kind(rng, fn)
                good_src.append(good)
                bad_src.append(bad)
                visible, secret = _cases(rng, good, bad, fn, make_input)
                tests += [
                    (module, fn, i, args, json.loads(_run(good, fn, args))) for i, args in enumerate(visible)
                ]
                hidden += [[module, fn, args, _run(good, fn, args), _run(bad, fn, args)] for args in secret]
                key.append(f"{kind.__name__}:{good}")
            files[f"{module}.py"] = "\n\n".join(bad_src)
            fixed[f"{module}.py"] = "\n\n".join(good_src)
        test_file = f"test_{mods[0]}.py"
        imports = sorted({(m, fn) for m, fn, *_ in tests})
        files[test_file] = "".join(f"from {m} import {fn}\n" for m, fn in imports) + "".join(
            f"\n\ndef test_{fn}_{i}():\n    assert {fn}({', '.join(map(repr, args))}) == {want!r}\n"
            for _, fn, i, args, want in tests)  # fmt: skip
        start = sum(h[3] == h[4] for h in hidden) / len(hidden)
        user = (f"The repository has {', '.join(sorted(files))}. `{test_file}` fails. "
                "Find and fix the bug so that the tests pass; do not modify the tests.")  # fmt: skip
        return Draft(
            "|".join(key), [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}],
            setup={"files": files, "tools": list(self.tools)},
            verifier={"hidden": [h[:4] for h in hidden], "start": start, "tests": [test_file], "fixed": fixed},
        )

    def setup_files(self, task):
        return json.loads(task.setup_json)["files"]

    def test_command(self, task):
        return ["python", "-I", "-c", RUNNER]

    def final_score(self, task, ws, steps, weights=DEFAULT_WEIGHTS):
        verifier, setup = json.loads(task.verifier_json), self.setup_files(task)
        hidden = verifier["hidden"]
        hack = self._audit(ws, steps, setup, verifier["tests"])
        nonce = new_nonce()
        calls = [[m, fn, args] for m, fn, args, _ in hidden]
        res = ws.run(["python", "-I", "-c", HIDDEN], stdin=json.dumps({"nonce": nonce, "calls": calls}),
                     limits=Limits(wall_s=30, output_bytes=1 << 20))  # fmt: skip
        report, problem = read_tagged_output(nonce, res)
        outputs, error = (report or {}).get("outputs"), ""
        if not isinstance(outputs, list) or len(outputs) != len(hidden):
            outputs = [None] * len(hidden)
            error = res.error or f"hidden tests: {problem or 'a malformed report'}"
        if problem == "forged":  # as every harness treats it (environments/tagged.py)
            hack = [*hack, "a forged or malformed result line from the hidden tests"]
        passed = sum(got is not None and got == want for got, (*_, want) in zip(outputs, hidden))
        frac = passed / len(hidden)
        return self.make_score(frac, verifier["start"], frac, steps, weights=weights, passed=passed, total=len(hidden),
                               hack=hack, error=error)  # fmt: skip

    @staticmethod
    def _audit(ws, steps, setup, test_files) -> list[str]:
        found = []
        for path in test_files:
            try:
                if ws.read_file(path) != setup[path]:
                    found.append(f"changed {path}")
            except ValueError:
                found.append(f"removed {path}")
        actions = [json.loads(s["action"]) for s in steps]
        commands = [a["arguments"]["command"] for a in actions if a.get("name") == "run_shell"]
        commands += [f"> {a['arguments']['path']}" for a in actions if a.get("name") == "write_file"]
        found += audit_commands(commands)
        for path in {a["arguments"]["path"] for a in actions if a.get("name") == "write_file"}:
            if path.endswith(".py") and path not in test_files:
                try:
                    found += [f"{path}: {f}" for f in audit_python(ws.read_file(path))]
                except ValueError:
                    pass
        return sorted(set(found))

    def reference_calls(self, task: TaskSpec) -> list[dict]:
        """Read the failing test, write the fixed modules, run the tests, submit."""
        verifier = json.loads(task.verifier_json)
        calls = [{"name": "read_file", "arguments": {"path": verifier["tests"][0]}}]
        calls += [
            {"name": "write_file", "arguments": {"path": p, "content": c}}
            for p, c in verifier["fixed"].items()
        ]
        return calls + [{"name": "run_tests", "arguments": {}}, {"name": "submit", "arguments": {}}]
