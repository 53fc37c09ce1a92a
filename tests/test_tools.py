"""Tool specs, the tool-call parser on good and malformed replies, observation
truncation, and each tool executed in a real bwrap workspace."""

from __future__ import annotations

import json

from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.tools import (
    InvalidCall,
    ToolCall,
    execute,
    is_valid,
    parse_tool_calls,
    step_record,
    tool_specs,
    tools_prompt,  # fmt: skip
    truncate,
)
from tests.multiturn_fixtures import box  # noqa: F401


def test_specs_are_openai_function_tools():
    specs = tool_specs()
    assert [s["function"]["name"] for s in specs] == [
        "run_shell",
        "read_file",
        "write_file",
        "run_tests",
        "submit",
    ]
    assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object" for s in specs)
    prompt = tools_prompt("Intro.", ["read_file", "submit"])
    assert "<tools>" in prompt and '"read_file"' in prompt and "run_shell" not in prompt


def test_parses_hermes_blocks_in_order():
    text = ('I will look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
            '<tool_call>{"name": "run_shell", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>')  # fmt: skip
    calls = parse_tool_calls(text)
    assert calls == [
        ToolCall("read_file", {"path": "a.py"}),
        ToolCall("run_shell", {"command": "ls"}),
        ToolCall("submit", {}),
    ]


def test_fenced_json_is_a_fallback_only():
    fenced = 'Here:\n```json\n{"name": "run_tests", "arguments": {}}\n```'
    assert parse_tool_calls(fenced) == [ToolCall("run_tests", {})]
    both = fenced + '\n<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    assert parse_tool_calls(both) == [ToolCall("submit", {})]
    assert parse_tool_calls('```json\n{"a": 1}\n```\nno calls here') == []


def test_unclosed_block_and_trailing_text_still_parse():
    assert parse_tool_calls('<tool_call>{"name": "submit", "arguments": {}}') == [ToolCall("submit", {})]
    assert parse_tool_calls('<tool_call>{"name": "submit"} trailing</tool_call>') == [ToolCall("submit", {})]


def test_malformed_calls_are_invalid_never_raise():
    cases = {
        "<tool_call>{name: run_shell}</tool_call>": "not valid JSON",
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>': "unknown tool",
        '<tool_call>{"name": "write_file", "arguments": {"path": "x"}}</tool_call>': "needs argument",
        '<tool_call>{"name": "run_shell", "arguments": {"command": 3}}</tool_call>': "must be strings",
        '<tool_call>["run_shell"]</tool_call>': "string 'name'",
        '<tool_call>{"name": "run_shell", "arguments": [1]}</tool_call>': "JSON object",
        '<tool_call>{"name": "run_shell", "arguments": "{bad"}</tool_call>': "not valid JSON",
    }
    for text, reason in cases.items():
        (call,) = parse_tool_calls(text)
        assert isinstance(call, InvalidCall) and reason in call.reason, (text, call)
    (call,) = parse_tool_calls(
        '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>', allowed=["submit"]
    )
    assert isinstance(call, InvalidCall) and "unknown tool" in call.reason


def test_truncate_keeps_head_and_tail():
    text = "HEAD" + "x" * 5000 + "TAIL"
    cut, was = truncate(text, 200)
    assert was and cut.startswith("HEAD") and cut.endswith("TAIL") and "bytes cut" in cut and len(cut) < 260
    assert truncate("short", 200) == ("short", False)


def test_tools_execute_in_a_workspace(box):  # noqa: F811
    with box.workspace({"a.txt": "hello\n"}) as ws:
        res = execute(ws, ToolCall("run_shell", {"command": "cat a.txt; echo err >&2; exit 3"}))
        assert res.exit_code == 3 and "hello" in res.observation and "err" in res.observation
        assert execute(ws, ToolCall("write_file", {"path": "d/b.txt", "content": "x"})).exit_code == 0
        assert execute(ws, ToolCall("read_file", {"path": "d/b.txt"})).observation == "x"
        missing = execute(ws, ToolCall("read_file", {"path": "nope.txt"}))
        assert missing.exit_code == 1 and "error" in missing.observation
        escape = execute(ws, ToolCall("write_file", {"path": "../../etc/x", "content": "x"}))
        assert escape.exit_code == 1 and "escapes" in escape.observation
        assert execute(ws, ToolCall("run_tests", {})).observation == "[this task has no test suite]"
        assert execute(ws, ToolCall("submit", {})).submitted
        slow = execute(ws, ToolCall("run_shell", {"command": "sleep 5"}), limits=Limits(wall_s=0.5))
        assert "[timed out]" in slow.observation
        big = execute(ws, ToolCall("run_shell", {"command": "seq 1 3000"}), max_chars=300)
        assert big.truncated and big.observation.rstrip().endswith("3000") and "bytes cut" in big.observation
        huge = execute(ws, ToolCall("run_shell", {"command": "seq 1 100000"}), max_chars=300)
        assert huge.truncated and huge.observation.endswith("[output beyond the sandbox's limit was dropped]")


def test_step_records_mark_invalid_calls():
    bad = parse_tool_calls("<tool_call>oops</tool_call>")[0]
    rec = step_record(bad, execute(None, bad))
    assert rec["exit_code"] is None and "invalid tool call" in rec["observation"] and not is_valid(rec)
    good = ToolCall("submit", {})
    assert is_valid(step_record(good, execute(None, good)))
    assert json.loads(step_record(good, execute(None, good))["action"]) == {"name": "submit", "arguments": {}}
