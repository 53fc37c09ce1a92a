"""Tools for multi-turn domains: their specs, a parser for the model's calls, and their
execution inside a sandbox `Workspace`.

Format. The specs are OpenAI chat "function" tools (JSON schema), so they can be handed
to a chat template's `tools=` argument or described in a system prompt (`tools_prompt`).
How the model writes a call depends on its family (environments/toolkit/tool_formats.py); by
default a Hermes/Qwen block,

    <tool_call>{"name": "run_shell", "arguments": {"command": "ls"}}</tool_call>

which is what small chat models emit when tools are described in the system prompt.

Robustness. Parsing never raises: a block that is not JSON, names no known tool, or lacks
required arguments becomes an `InvalidCall`, which the runner reports to the model as an
observation and which counts against the valid-call process reward. Execution never
raises either: a sandbox failure becomes an observation with exit code None.

Observations are cut to `max_chars` keeping the head and the tail (errors and test
summaries tend to be at the end), with a marker saying how many bytes were cut.
More tools (`EXTRA_SPECS`: str_replace, list_files, run_python) are offered only where a
domain names them (workspace tasks: environments/sources/workspace_tasks.py), and a task may
bring tools of its own: a spec with a `command`, run by bash in the workspace with the call's
arguments as JSON on stdin (`parse_tool_calls(..., specs=)` and `execute(..., specs=)`).
Not done: parallel calls inside one turn run one after another, in order.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from flywheel.environments.sandbox import Limits, Workspace
from flywheel.environments.toolkit.tool_formats import BY_NAME, ToolFormat

TOOL_SPECS = {
    "run_shell": {
        "description": "Run a bash command in the task's working directory and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command line."}},
                       "required": ["command"]},
    },
    "read_file": {
        "description": "Return the contents of a file (path relative to the working directory).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    "write_file": {
        "description": "Create or overwrite a file with the given content (parent directories are created).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]},
    },
    "run_tests": {
        "description": "Run the task's visible test suite and return its report.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
    "submit": {
        "description": "Finish the task. Call it once the work is done; nothing runs after it.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}  # fmt: skip
EXTRA_SPECS = {
    "str_replace": {
        "description": "Replace the one occurrence of `old` in a file with `new` (fails when `old` occurs zero or several times).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
                                                        "new": {"type": "string"}}, "required": ["path", "old", "new"]},
    },
    "list_files": {
        "description": "List the files and directories under a directory of the workspace (default: the working directory).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": []},
    },
    "run_python": {
        "description": "Run a Python program in the working directory and return its output.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}  # fmt: skip
KNOWN_SPECS = {**TOOL_SPECS, **EXTRA_SPECS}
LIST_FILES = r"""
import os, sys
root = sys.stdin.read() or "."
for base, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(dirs) + sorted(files):
        path = os.path.relpath(os.path.join(base, name), ".")
        print(path + ("/" if name in dirs and not os.path.islink(os.path.join(base, name)) else ""))
"""


def tool_specs(names: list[str] | None = None, specs: dict | None = None) -> list[dict]:
    """The OpenAI chat tool list for `names` (default: the TOOL_SPECS ones), looked up in
    `specs` (a task's own table) before the known tools; a spec's `command` stays out."""
    table = {**KNOWN_SPECS, **(specs or {})}
    return [
        {"type": "function", "function": {"name": n, **{k: v for k, v in table[n].items() if k != "command"}}}
        for n in (names or list(TOOL_SPECS))
    ]


def tools_prompt(
    intro: str, names: list[str] | None = None, fmt: ToolFormat | None = None, specs: dict | None = None
) -> str:
    """A system prompt that describes the tools and how to call them (Hermes by default),
    for chat templates that know nothing of tools (the spec JSON is what models were
    trained to read)."""
    return (fmt or BY_NAME["hermes"]).system_prompt(intro, tool_specs(names, specs), template_has_tools=False)


@dataclass
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "arguments": self.arguments}, sort_keys=True)


@dataclass
class InvalidCall:
    raw: str
    reason: str

    def to_json(self) -> str:
        return json.dumps({"invalid": self.reason, "raw": self.raw[:500]})


JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def _check(obj, raw: str, allowed: list[str] | None, specs: dict | None = None) -> ToolCall | InvalidCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return InvalidCall(raw, "a tool call is a JSON object with a string 'name'")
    name, args = obj["name"], obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models encode the arguments as a JSON string (OpenAI style)
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return InvalidCall(raw, f"arguments of {name} are not valid JSON")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return InvalidCall(raw, f"arguments of {name} must be a JSON object")
    table = {**KNOWN_SPECS, **(specs or {})}
    if name not in table or (allowed is not None and name not in allowed):
        return InvalidCall(raw, f"unknown tool {name!r}; available: {', '.join(allowed or TOOL_SPECS)}")
    params = table[name]["parameters"]
    missing = [p for p in params.get("required", []) if p not in args]
    if missing:
        return InvalidCall(raw, f"{name} needs argument(s): {', '.join(missing)}")
    props = params.get("properties", {})
    wrong = [p for p in args if p in props and not _typed(args[p], props[p].get("type", "string"))]
    if wrong and all(props[p].get("type", "string") == "string" for p in wrong):
        return InvalidCall(raw, f"{name}: argument(s) {', '.join(wrong)} must be strings")
    if wrong:
        kinds = ", ".join(f"{p}: {props[p].get('type', 'string')}" for p in wrong)
        return InvalidCall(raw, f"{name}: argument(s) of the wrong type ({kinds})")
    return ToolCall(name, {k: args[k] for k in props if k in args})


def _typed(value, kind) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    want = JSON_TYPES.get(kind) if isinstance(kind, str) else None
    return want is None or isinstance(value, want)


def parse_tool_calls(
    text: str, allowed: list[str] | None = None, fmt: ToolFormat | None = None, specs: dict | None = None
) -> list[ToolCall | InvalidCall]:
    """Every tool call in `text` written in format `fmt` (environments/toolkit/tool_formats.py;
    Hermes by default), in order; empty when the text makes none. `specs`: a task's own
    tools (name -> spec), beside the known ones."""
    calls: list[ToolCall | InvalidCall] = []
    for block in (fmt or BY_NAME["hermes"]).blocks(text):
        try:
            obj = json.loads(block)
        except ValueError:
            try:  # a trailing comment or a second object after the first: take the first
                obj, _ = json.JSONDecoder().raw_decode(block)
            except ValueError:
                calls.append(InvalidCall(block, "the tool call is not valid JSON"))
                continue
        for item in obj if isinstance(obj, list) else [obj]:
            calls.append(_check(item, block, allowed, specs))
    return calls


def truncate(text: str, max_chars: int) -> tuple[str, bool]:
    """(text, was it cut); a cut keeps the head and the tail around a marker."""
    if len(text) <= max_chars:
        return text, False
    head = max_chars * 2 // 5
    tail = max_chars - head
    cut = len(text[head : len(text) - tail].encode())
    return f"{text[:head]}\n[... {cut} bytes cut ...]\n{text[len(text) - tail :]}", True


@dataclass
class StepResult:
    observation: str
    exit_code: int | None
    duration_s: float
    truncated: bool
    submitted: bool = False


def _format(res, limit: int) -> tuple[str, bool]:
    if res.error:
        return f"[sandbox error: {res.error}]", False
    parts = [res.stdout]
    if res.stderr:
        parts.append(("[stderr]\n" if res.stdout else "") + res.stderr)
    if res.timed_out:
        parts.append("[timed out]")
    text = "\n".join(p.rstrip("\n") for p in parts if p) or "[no output]"
    text, cut = truncate(text, limit)
    if res.truncated:  # the sandbox kept only the first output_bytes: the real tail is gone
        text += "\n[output beyond the sandbox's limit was dropped]"
    return f"[exit code {res.exit_code}]\n{text}", cut or res.truncated


def execute(
    ws: Workspace,
    call: ToolCall | InvalidCall,
    *,
    limits: Limits | None = None,
    test_command: list[str] | None = None,
    max_chars: int = 2000,
    specs: dict | None = None,
) -> StepResult:
    """Run one call in `ws`. `test_command` is what `run_tests` runs (None: the task has no
    tests); `specs`: the task's own tools (a spec's `command` runs with the arguments as
    JSON on stdin). The observation is what the model sees next."""
    start = time.monotonic()

    def done(obs: str, code: int | None, cut: bool = False, submitted: bool = False) -> StepResult:
        return StepResult(obs, code, time.monotonic() - start, cut, submitted)

    if isinstance(call, InvalidCall):
        return done(f"[invalid tool call: {call.reason}]", None)
    args = call.arguments
    try:
        if call.name == "submit":
            return done("[submitted]", 0, submitted=True)
        if call.name == "run_shell":
            res = ws.run(["bash", "-c", args["command"]], limits=limits)
        elif call.name == "run_tests":
            if test_command is None:
                return done("[this task has no test suite]", 1)
            res = ws.run(test_command, limits=limits)
        elif call.name == "read_file":
            content = ws.read_file(args["path"], max_bytes=max(4 * max_chars, 1 << 16))
            text, cut = truncate(content, max_chars)
            return done(text or "[empty file]", 0, cut)
        elif call.name == "write_file":
            ws.put({args["path"]: args["content"]})
            return done(f"[wrote {len(args['content'].encode())} bytes to {args['path']}]", 0)
        elif call.name in (specs or {}) and "command" in specs[call.name]:
            res = ws.run(["bash", "-c", specs[call.name]["command"]], stdin=json.dumps(args), limits=limits)
        elif call.name == "str_replace":
            content = ws.read_file(args["path"], max_bytes=16 << 20)
            found = content.count(args["old"]) if args["old"] else 0
            if found != 1:
                return done(f"[error: `old` occurs {found} times in {args['path']}; it must occur exactly once]", 1)
            ws.put({args["path"]: content.replace(args["old"], args["new"], 1)})
            return done(f"[replaced 1 occurrence in {args['path']}]", 0)
        elif call.name == "list_files":
            res = ws.run(["python", "-I", "-c", LIST_FILES], stdin=args.get("path") or ".", limits=limits)
        elif call.name == "run_python":
            res = ws.run(["python", "-I", "-c", args["code"]], limits=limits)
        else:  # parse_tool_calls only lets known tools through
            return done(f"[tool {call.name} is not executable]", None)
    except (ValueError, OSError, RuntimeError) as exc:  # bad path, missing file, worker gone
        return done(f"[error: {exc}]", 1)
    obs, cut = _format(res, max_chars)
    return StepResult(obs, res.exit_code if not res.error else None, res.duration_s, cut)


def step_record(call: ToolCall | InvalidCall, result: StepResult) -> dict:
    """One entry of `Trajectory.steps`."""
    return {"action": call.to_json(), "observation": result.observation, "exit_code": result.exit_code,
            "duration_s": float(result.duration_s), "truncated": bool(result.truncated)}  # fmt: skip


def is_valid(step: dict) -> bool:
    return "invalid" not in json.loads(step["action"])
