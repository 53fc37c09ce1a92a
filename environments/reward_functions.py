"""User reward functions (`reward.functions`), in TRL's calling convention, run in the sandbox.

A function is named `pkg.module:fn` and called as `fn(prompts, completions, **columns)
-> list[float]`, one value per completion, with the task's columns as lists (TRL passes
a dataset's columns the same way). Prompts and completions are plain text when the task's
prompt came as text, else chat messages (the completion as `[{"role": "assistant",
"content": ...}]`), as TRL does for conversational datasets.

Why the sandbox: the functions read model text and they are the user's code, so neither
runs in the flow's process. Their source is found without importing it (importlib's
PathFinder over the working dir and sys.path), sent with each job as files, and imported
there by a small harness; the sandbox python sees the stdlib plus `sandbox.libraries`, so
what a function imports must be there. A function that does not import (or is not
callable) stops the run at start-up, naming it (`probe`).

One job per function per chunk of trajectories. A call that raises, runs past its time,
returns the wrong number of values or a value that is not a finite number is retried
one completion at a time, so only the trajectories it fails on get an error: for those
the function's component carries the error and adds nothing to the reward, and the
cycle goes on.

Range: every function has one, [-1, 1] unless it declares its own as an attribute next
to its code (`fn.reward_range = (0, 2)`, read in the sandbox; `load` also takes one per
spec). A value outside it, or one that is not a finite number, is refused on the host
(whatever the sandbox's report says) with the reason on that trajectory's component,
like an error: a refused value adds nothing, where clipping would hand a function fooled
by model text into returning 1e200 the top reward. One huge value can then never swamp
its group's advantages (policy/grpo.py clips as well).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from pathlib import Path

from flywheel.environments.sandbox import ExecResult, Job, Limits
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged

ROOT = "_rewards"  # where the sources sit in the job's workspace
MAX_SOURCE_BYTES = 4 << 20
CHUNK = 32
DEFAULT_RANGE = (-1.0, 1.0)

HARNESS = PRELUDE + r"""
import importlib, math, sys, _signal
def on_alarm(*_):
    raise TimeoutError("the reward function took too long")
_signal.signal(_signal.SIGALRM, on_alarm)
sys.path.insert(0, os.path.join(os.getcwd(), "_rewards"))
try:
    _signal.alarm(spec["timeout_s"])
    fn = getattr(importlib.import_module(spec["module"]), spec["attr"])
    _signal.alarm(0)
    if not callable(fn):
        raise TypeError(spec["attr"] + " is not callable")
    declared = getattr(fn, "reward_range", None)  # the host checks its values
    try:
        declared = None if declared is None else [float(x) for x in declared]
    except Exception:
        declared = {"not_a_range": repr(declared)[:100]}
except BaseException as e:
    report(load_error=f"{type(e).__name__}: {e}"[:500])
if spec.get("probe"):
    report(ok=True, range=declared)
def call(prompts, completions, columns):
    _signal.alarm(spec["timeout_s"])
    try:
        values = fn(prompts=prompts, completions=completions, **columns)
    finally:
        _signal.alarm(0)
    values = list(values)
    if len(values) != len(completions):
        raise ValueError(f"returned {len(values)} values for {len(completions)} completions")
    out = []
    for v in values:
        v = float(v)
        if not math.isfinite(v):
            raise ValueError(f"returned {v}")
        out.append(v)
    return out
items = spec["items"]
try:
    values, errors = call([i["prompt"] for i in items], [i["completion"] for i in items],
                          {k: [i["columns"].get(k) for i in items] for k in spec["columns"]}), [""] * len(items)
except BaseException as e:
    values, errors = [], []
    for i in items:  # one at a time, so one bad completion does not cost the others
        try:
            values += call([i["prompt"]], [i["completion"]], {k: [i["columns"].get(k)] for k in spec["columns"]})
            errors.append("")
        except BaseException as e:
            values.append(None)
            errors.append(f"{type(e).__name__}: {e}"[:300])
report(values=values, errors=errors, range=declared)
"""


class RewardFunctionError(ValueError):
    """A reward function that cannot be used: not found, does not import, not callable."""


@dataclass(frozen=True)
class RewardFunction:
    name: str  # "pkg.module:fn"
    weight: float
    module: str
    attr: str
    sources: dict[str, str] = field(repr=False, hash=False, compare=False)
    range: tuple[float, float] = DEFAULT_RANGE  # used unless the function declares `reward_range`
    range_given: bool = False  # the range came from the config (reward.functions[].range): it wins


def _sources(module: str, name: str) -> dict[str, str]:
    """The module's source files (a whole top-level package), found without importing it."""
    top = module.split(".")[0]
    spec = PathFinder.find_spec(top, [os.getcwd(), *sys.path])
    if spec is None:
        raise RewardFunctionError(f"reward function {name}: no module {top!r} in the working dir or sys.path")
    files: dict[str, str] = {}
    if spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0])
        paths = sorted(root.rglob("*.py"))
        base = root.parent
    elif spec.origin and spec.origin.endswith(".py"):
        paths, base = [Path(spec.origin)], Path(spec.origin).parent
    else:
        raise RewardFunctionError(f"reward function {name}: {top!r} is not Python source ({spec.origin})")
    size = 0
    for p in paths:
        if "__pycache__" in p.parts:
            continue
        text = p.read_text(encoding="utf-8")
        size += len(text)
        if size > MAX_SOURCE_BYTES:
            raise RewardFunctionError(f"reward function {name}: the package {top!r} is over {MAX_SOURCE_BYTES} bytes")
        files[f"{ROOT}/{p.relative_to(base)}"] = text
    wanted = module.replace(".", "/")
    if f"{ROOT}/{wanted}.py" not in files and f"{ROOT}/{wanted}/__init__.py" not in files:
        raise RewardFunctionError(f"reward function {name}: no module {module!r} in {base}")
    return files


def load(specs: list[tuple]) -> list[RewardFunction]:
    """Specs: (name, weight) or (name, weight, (low, high))."""
    out = []
    for name, weight, *rest in specs:
        module, sep, attr = name.partition(":")
        if not sep or not module or not attr.isidentifier():
            raise RewardFunctionError(f"reward function {name!r} is not of the form 'pkg.module:function'")
        bounds = checked_range(rest[0]) if rest else DEFAULT_RANGE
        if isinstance(bounds, str):
            raise RewardFunctionError(f"reward function {name}: {bounds}")
        out.append(RewardFunction(name, weight, module, attr, _sources(module, name), bounds, bool(rest)))
    return out


def checked_range(value) -> tuple[float, float] | str:
    """(low, high) from a declaration, or why it is not one."""
    try:
        low, high = (float(x) for x in value)
    except (TypeError, ValueError):
        return f"its range must be (low, high), not {value!r}"
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        return f"its range must be finite with low < high, not ({low}, {high})"
    return low, high


def _bounds(fn: RewardFunction, report: dict) -> tuple[float, float] | str:
    declared = report.get("range")
    if isinstance(declared, dict):
        return f"its range must be (low, high), not {str(declared.get('not_a_range'))[:100]}"
    return fn.range if declared is None or fn.range_given else checked_range(declared)


def _job(fn: RewardFunction, items: list[dict], timeout_s: int, probe: bool = False) -> Job:
    columns = sorted({k for i in items for k in i["columns"]})
    spec = {"nonce": new_nonce(), "module": fn.module, "attr": fn.attr, "timeout_s": timeout_s,
            "items": items, "columns": columns, "probe": probe}  # fmt: skip
    limits = Limits(wall_s=timeout_s * (len(items) + 2) + 5, cpu_s=timeout_s * (len(items) + 2) + 5)
    return Job(["python", "-I", "-c", HARNESS], files=dict(fn.sources), stdin=json.dumps(spec), limits=limits)


def probe(sandbox, functions: list[RewardFunction], timeout_s: int = 10) -> None:
    """Import each function in the sandbox; raise RewardFunctionError naming one that fails."""
    jobs = [_job(fn, [], timeout_s, probe=True) for fn in functions]
    for fn, job, res in zip(functions, jobs, sandbox.map(jobs)):
        report, problem = read_tagged(job, res)
        if res.error or report is None:
            raise RewardFunctionError(f"reward function {fn.name}: the sandbox gave no answer: {res.error or problem}")
        if report.get("load_error"):
            raise RewardFunctionError(f"reward function {fn.name} does not import in the sandbox: {report['load_error']}")
        bounds = _bounds(fn, report)
        if isinstance(bounds, str):
            raise RewardFunctionError(f"reward function {fn.name}: reward_range: {bounds}")


def evaluate(sandbox, functions: list[RewardFunction], items: list[dict], timeout_s: int = 5) -> list[dict]:
    """Per item ({"prompt", "completion", "columns"}), {function name: (value, error)}."""
    out: list[dict] = [{} for _ in items]
    jobs, where = [], []
    for fn in functions:
        for start in range(0, len(items), CHUNK):
            jobs.append(_job(fn, items[start : start + CHUNK], timeout_s))
            where.append((fn, start))
    for job, res, (fn, start) in zip(jobs, sandbox.map(jobs), where):
        n = len(json.loads(job.stdin)["items"])
        for i, pair in enumerate(_read(job, res, n, fn)):
            out[start + i][fn.name] = pair
    return out


def _read(job: Job, res: ExecResult, n: int, fn: RewardFunction) -> list[tuple[float | None, str]]:
    report, problem = read_tagged(job, res)
    if res.error or report is None:
        why = res.error or ("timed out" if res.timed_out else problem)
        return [(None, f"no result: {why}")] * n
    if report.get("load_error"):
        return [(None, f"does not import: {report['load_error']}")] * n
    values, errors = report.get("values") or [], report.get("errors") or []
    if len(values) != n or len(errors) != n:
        return [(None, "a malformed result")] * n
    bounds = _bounds(fn, report)
    if isinstance(bounds, str):
        return [(None, f"reward_range: {bounds}")] * n
    return [_value(v, str(e), bounds) for v, e in zip(values, errors)]


def _value(v, error: str, bounds: tuple[float, float]) -> tuple[float | None, str]:
    """(the value, "") when it is a finite number in range, else (None, why)."""
    if error:
        return None, error
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None, f"returned {type(v).__name__}, not a number"
    low, high = bounds
    try:
        ok = math.isfinite(float(v)) and low <= v <= high
    except OverflowError:  # an int no float holds
        ok = False
    if not ok:
        shown = repr(v) if isinstance(v, float) or abs(v) < 10**20 else f"an int of {v.bit_length()} bits"
        return None, f"returned {shown}, outside its range [{low:g}, {high:g}] (declare another as fn.reward_range)"
    return float(v), ""
