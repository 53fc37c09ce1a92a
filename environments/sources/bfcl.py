"""BFCL v4 multi-turn entries, read at run time from the `bfcl-eval` wheel (2026.3.23).

What is read, and only read (nothing of the wheel is copied into this repository, and
none of its code runs on the host):
- `bfcl_eval/data/BFCL_v4_multi_turn_{base,long_context,miss_func,miss_param}.json`: the
  800 entries (one user message per turn; `initial_config` per API class;
  `involved_classes`; `missed_function` for miss_func: functions held back until a turn);
- `bfcl_eval/data/possible_answer/...`: the ground-truth calls of each turn, Python call
  text such as `mv(source='a', destination='b')` or `sort('a.txt')`. They are parsed with
  `ast` and `ast.literal_eval` (never evaluated); positional arguments are named from the
  method's signature, read from the API class's source with `ast` (the function docs'
  property order differs from the signature for one method);
- `bfcl_eval/data/multi_turn_func_doc/*.json`: each class's function docs, turned into
  OpenAI tool specs (BFCL's `dict`/`float` become JSON schema's `object`/`number`).
The API classes themselves run only inside the sandbox (environments/sources/bfcl_driver.py).

An entry whose ground truth would not pass the argument check every model call goes
through (entry 173 of each category gives a string where the doc says integer) is set
aside with its reason (`set_aside`), never dropped silently.

Split: by entry id (`split_of("bfcl:<id>")`, a stable hash), one entry in five held out;
the same entry is on the same side in every domain that includes it. Levels: by the
number of ground-truth calls (1: at most 4, 2: 5 or 6, 3: 7 or more).
Not done: the memory, web-search and single-turn BFCL categories.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from flywheel.environments.base import split_of
from flywheel.environments.toolkit.tool_formats import BY_NAME
from flywheel.environments.toolkit.tools import InvalidCall, parse_tool_calls

WHEEL = "bfcl-eval==2026.3.23"
CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
MODULES = {  # the multi-turn API classes: the stem of their source and of their docs (bfcl_eval/constants)
    "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
    "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control",
}  # fmt: skip
SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
ADDED_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"  # BFCL's own text


class BfclDataError(ValueError):
    """The wheel is missing, or its data is not what this module reads."""


def package_dir() -> Path:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BfclDataError(f"the bfcl: domains need the BFCL wheel: pip install --no-deps {WHEEL}")
    return Path(list(spec.submodule_search_locations)[0])


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise BfclDataError(f"{path} is not in the installed bfcl-eval (need {WHEEL})")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@lru_cache(maxsize=None)
def function_docs(cls: str) -> tuple[dict, ...]:
    """The class's function docs as in the wheel (name, description, parameters, response)."""
    return tuple(_jsonl(package_dir() / "data" / "multi_turn_func_doc" / f"{MODULES[cls]}.json"))


def _schema(node: dict) -> dict:
    """BFCL's parameter schema as JSON schema (types renamed, recursively)."""
    out = {}
    for key, value in node.items():
        if key == "type":
            kind = SCHEMA_TYPES.get(value, value)
            if kind is not None:
                out["type"] = kind
        elif key == "properties":
            out[key] = {k: _schema(v) for k, v in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = _schema(value)
        else:
            out[key] = value
    return out


def tool_spec(doc: dict) -> dict:
    """One function doc as an OpenAI chat tool (its `response` schema left out)."""
    params = _schema(doc["parameters"])
    params.setdefault("properties", {})
    params.setdefault("required", [])
    return {"type": "function", "function": {"name": doc["name"], "description": doc["description"],
                                             "parameters": params}}  # fmt: skip


@lru_cache(maxsize=None)
def signatures(cls: str) -> dict[str, tuple[str, ...]]:
    """method -> its parameter names (without self), read from the class's source with ast."""
    path = package_dir() / "eval_checker" / "multi_turn_eval" / "func_source_code" / f"{MODULES[cls]}.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {f.name: tuple(a.arg for a in [*f.args.posonlyargs, *f.args.args][1:])
                    for f in node.body if isinstance(f, ast.FunctionDef)}  # fmt: skip
    raise BfclDataError(f"class {cls} not found in {path}")


def parse_call(text: str, classes: list[str]) -> dict:
    """A ground-truth call text as {"name", "arguments"}: literals only, never evaluated."""
    node = ast.parse(text.strip(), mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise BfclDataError(f"not a plain call: {text!r}")
    name = node.func.id
    params = next((signatures(c)[name] for c in classes if name in signatures(c)), None)
    if params is None:
        raise BfclDataError(f"{name} is a method of none of {classes}")
    if len(node.args) > len(params):
        raise BfclDataError(f"too many positional arguments in {text!r}")
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return {"name": name, "arguments": args}


def level_of(calls: int) -> int:
    return 1 if calls <= 4 else 2 if calls <= 6 else 3


def entries(category: str) -> tuple[dict, ...]:
    """The category's usable entries, each with its parsed ground truth, level and split."""
    return _read(category)[0]


def set_aside(category: str) -> tuple[dict, ...]:
    """The category's entries left out ({"id", "reason"}): their ground truth breaks the
    argument check every model call goes through (a string where the doc says integer)."""
    return _read(category)[1]


def truth_problem(entry: dict) -> str:
    """Why the entry's ground-truth calls would be refused as model calls ("" if none)."""
    table = table_of(entry)
    for turn, calls in enumerate(entry["ground_truth"]):
        for call in calls:
            (parsed,) = parse_tool_calls(
                BY_NAME["hermes"].render([call]), list(table), BY_NAME["hermes"], table
            )
            if isinstance(parsed, InvalidCall):
                return f"turn {turn}: {parsed.reason}"
    return ""


@lru_cache(maxsize=None)
def _read(category: str) -> tuple[tuple[dict, ...], tuple[dict, ...]]:
    if category not in CATEGORIES:
        raise BfclDataError(f"unknown BFCL multi-turn category {category!r}; known: {', '.join(CATEGORIES)}")
    data = package_dir() / "data"
    rows = _jsonl(data / f"BFCL_v4_multi_turn_{category}.json")
    answers = {
        a["id"]: a["ground_truth"]
        for a in _jsonl(data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")
    }
    out = []
    for row in rows:
        turns = answers.get(row["id"])
        if turns is None or len(turns) != len(row["question"]):
            raise BfclDataError(f"{row['id']}: its ground truth does not have one list of calls per turn")
        classes = list(row["involved_classes"])
        truth = [[parse_call(c, classes) for c in turn] for turn in turns]
        out.append({
            "id": row["id"], "category": category, "classes": classes,
            "initial_config": row.get("initial_config", {}),
            "turns": [[dict(m) for m in turn] for turn in row["question"]],
            "missed": {int(k): list(v) for k, v in row.get("missed_function", {}).items()},
            "ground_truth": truth, "level": level_of(sum(map(len, truth))),
            "split": split_of(f"bfcl:{row['id']}"),
        })  # fmt: skip
    problems = {e["id"]: truth_problem(e) for e in out}
    kept = tuple(e for e in out if not problems[e["id"]])
    return kept, tuple({"id": i, "reason": why} for i, why in problems.items() if why)


def functions(entry: dict, turn: int | None = None) -> list[str]:
    """The function names the entry's docs list in user turn `turn` (a missed function from
    the turn that reveals it on); every one of its classes' functions when `turn` is None."""
    later = {f for t, names in entry["missed"].items() if turn is not None and int(t) > turn for f in names}
    return [d["name"] for c in entry["classes"] for d in function_docs(c) if d["name"] not in later]


def specs(entry: dict, names: list[str]) -> list[dict]:
    by_name = {d["name"]: d for c in entry["classes"] for d in function_docs(c)}
    return [tool_spec(by_name[n]) for n in names]


def table_of(entry: dict, turn: int | None = None) -> dict[str, dict]:
    """name -> spec (environments/toolkit/tools.py's tool table) of `functions(entry, turn)`."""
    return {s["function"]["name"]: {k: v for k, v in s["function"].items() if k != "name"}
            for s in specs(entry, functions(entry, turn))}  # fmt: skip
