"""A workspace task row's tools and reference solution, read and checked (workspace_tasks.py).

Tools: the standard set by name (with the usual aliases: bash, edit, ls, ...) or the task's
own, `{name, description, parameters, command}`, whose command runs in the workspace with the
call's arguments; `submit` is always offered. The solution: a shell script or a list of tool
calls. Anything else is a RowError naming what was wrong (the row is quarantined)."""

from __future__ import annotations

from flywheel.environments.toolkit.tools import KNOWN_SPECS
from flywheel.environments.verifiers.base import RowError

ALIASES = {"bash": "run_shell", "shell": "run_shell", "read_file": "read_file", "read": "read_file",
           "write_file": "write_file", "write": "write_file", "str_replace": "str_replace", "edit": "str_replace",
           "list": "list_files", "list_files": "list_files", "ls": "list_files", "python": "run_python",
           "run_python": "run_python", "submit": "submit", "run_shell": "run_shell"}  # fmt: skip
DEFAULT_TOOLS = ("run_shell", "read_file", "write_file", "str_replace", "list_files", "submit")


def row_tools(raw) -> dict[str, dict]:
    if raw is None:
        return {n: KNOWN_SPECS[n] for n in DEFAULT_TOOLS}
    if not isinstance(raw, list) or not raw:
        raise RowError("tools must be a non-empty list")
    out: dict[str, dict] = {}
    for t in raw:
        if isinstance(t, str):
            if t not in ALIASES:
                raise RowError(f"unknown tool {t!r}; the standard set: {', '.join(sorted(set(ALIASES)))}")
            out[ALIASES[t]] = KNOWN_SPECS[ALIASES[t]]
        elif isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("command"), str):
            name, params = (
                t["name"],
                t.get("parameters") or {"type": "object", "properties": {}, "required": []},
            )
            if name in KNOWN_SPECS or not name.replace("_", "").isalnum():
                raise RowError(f"own tool {name!r}: a new name of letters, digits and _ is needed")
            if not isinstance(params, dict) or not isinstance(params.get("properties", {}), dict):
                raise RowError(f"own tool {name!r}: parameters must be a JSON schema object")
            out[name] = {
                "description": str(t.get("description", "")),
                "parameters": params,
                "command": t["command"],
            }
        else:
            raise RowError("a tool is a standard name or {name, description, parameters, command}")
    out.setdefault("submit", KNOWN_SPECS["submit"])
    return out


def row_solution(raw, tools: dict) -> list[dict] | None:
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip():
        return [{"name": "run_shell", "arguments": {"command": raw}}]
    if (
        isinstance(raw, list)
        and raw
        and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in raw)
    ):
        return [{"name": c["name"], "arguments": dict(c.get("arguments") or {})} for c in raw]
    raise RowError("solution must be a shell script or a list of tool calls {name, arguments}")
