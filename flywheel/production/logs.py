"""Production log records -> traces: the shapes read, what is checked, what a trace keeps.

A record is one JSON object (a JSONL line or a Parquet row) in one of these shapes:

- NVIDIA's Data Flywheel Blueprint: `timestamp`, `workload_id`, `client_id`, `request`
  (an OpenAI Chat Completions request: `messages`, `tools`, options) and `response` (a
  Chat Completions response: `choices[0].message`);
- the same `request`/`response` pair without the Blueprint's fields (the workload then
  comes from `--workload`, else "default");
- a bare conversation, `{"messages": [...]}`, whose last assistant message is the response.

Feedback is optional, under `feedback` or at the top level: `rating` (a number, a bool,
or thumbs "up"/"down"), and a corrected answer (`corrected_answer`, `correction` or
`expected`). Messages keep `tool_calls` (id, name, arguments as JSON text) and
`tool_call_id`; content given as parts keeps its text parts.

`parse_record` returns a trace (a dict in storage/traces.py's schema, scrubbed and with its
content hash as `trace_id`) or raises `RecordError` with the reason; the ingest flow
quarantines that record and goes on. The record is scrubbed before anything else is
read from it, so even a quarantine preview holds no secret; the scrubber decodes tool-call
`arguments` and reads content parts on their join (what `_text` stores), so a secret escaped
inside the JSON or split across parts is found (flywheel/production/scrub.py).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone

from flywheel.production.scrub import Scrubber
from flywheel.storage.schema import stable_id

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MAX_MESSAGE_CHARS = 100_000
RATINGS = {"up": 1.0, "thumbs_up": 1.0, "good": 1.0, "positive": 1.0, "+1": 1.0,
           "down": 0.0, "thumbs_down": 0.0, "bad": 0.0, "negative": 0.0, "-1": 0.0}  # fmt: skip
CORRECTED = ("corrected_answer", "correction", "corrected", "expected")


class RecordError(ValueError):
    pass


def _text(content, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text only (this flywheel trains text models)
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RecordError(f"{where}: unsupported content part {kind!r} (text parts only)")
            out.append(str(part.get("text", "")))
        return "".join(out)
    raise RecordError(f"{where}: content must be text or a list of text parts, not {type(content).__name__}")


def _tool_calls(calls, where: str) -> list[dict] | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        raise RecordError(f"{where}: tool_calls must be a list")
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RecordError(f"{where}: tool call {i} has no function name")
        args = fn.get("arguments", "{}")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except ValueError as exc:
            raise RecordError(f"{where}: tool call {i} ({fn['name']}) arguments do not parse as JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise RecordError(f"{where}: tool call {i} ({fn['name']}) arguments must be a JSON object")
        out.append({"id": str(call.get("id") or ""), "name": fn["name"], "arguments": json.dumps(parsed, sort_keys=True)})
    return out


def _message(raw, where: str, max_chars: int) -> dict:
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: a message must be an object")
    role = ROLES.get(raw.get("role"))
    if role is None:
        raise RecordError(f"{where}: unknown role {raw.get('role')!r}; known: {', '.join(ROLES)}")
    content = _text(raw.get("content"), where)
    if content is not None and len(content) > max_chars:
        raise RecordError(f"{where}: {len(content)} characters, over the limit of {max_chars}")
    calls = _tool_calls(raw.get("tool_calls"), where)
    if content is None and not calls:
        content = ""
    return {"role": role, "content": content or "", "tool_calls": calls, "tool_call_id": raw.get("tool_call_id")}


def _timestamp(value) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value  # epoch milliseconds are common too
        return datetime.fromtimestamp(seconds, timezone.utc)
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise RecordError(f"timestamp {value!r} is neither epoch seconds nor ISO 8601") from exc
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
    raise RecordError(f"timestamp {value!r} is neither epoch seconds nor ISO 8601")


def _rating(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in RATINGS:
        return RATINGS[value.strip().lower()]
    raise RecordError(f"rating {value!r} is not a number, a bool or up/down")


def _response(record: dict, messages: list) -> tuple[dict | None, list]:
    response = record.get("response")
    if response is None:  # a bare conversation: its last assistant message answered it
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
            return messages[-1], messages[:-1]
        return None, messages
    if isinstance(response, dict) and isinstance(response.get("choices"), list):
        if not response["choices"] or not isinstance(response["choices"][0], dict):
            raise RecordError("response has no choices")
        return response["choices"][0].get("message"), messages
    if isinstance(response, dict) and "role" in response:
        return response, messages
    raise RecordError("response is neither a Chat Completions response nor a message")


def parse_record(record, scrubber: Scrubber, counts: Counter, default_workload: str = "default",
                 max_chars: int = MAX_MESSAGE_CHARS) -> dict:  # fmt: skip
    """One log record -> a scrubbed trace (storage/traces.py's columns, less source/line)."""
    if not isinstance(record, dict):
        raise RecordError("not a JSON object")
    record = scrubber.scrub_value(record, counts)
    request = record.get("request") if isinstance(record.get("request"), dict) else record
    raw_messages = request.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise RecordError("no messages (request.messages or messages: a non-empty list)")
    response, raw_messages = _response(record, raw_messages)
    messages = [_message(m, f"message {i}", max_chars) for i, m in enumerate(raw_messages)]
    if not any(m["role"] == "user" for m in messages):
        raise RecordError("no user message")
    reply = _message(response, "response", max_chars) if response is not None else None
    if reply is not None and reply["role"] != "assistant":
        raise RecordError(f"response: role {reply['role']!r}, not assistant")
    tools = request.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RecordError("request.tools must be a list")
    feedback = record.get("feedback") if isinstance(record.get("feedback"), dict) else record
    corrected = next((feedback[k] for k in CORRECTED if feedback.get(k) is not None), None)
    if corrected is not None and not isinstance(corrected, str):
        corrected = json.dumps(corrected, sort_keys=True)
    workload = str(record.get("workload_id") or default_workload)
    options = {k: v for k, v in request.items() if k not in ("messages", "tools")}
    tools_json = json.dumps(tools, sort_keys=True) if tools else ""
    return {
        "trace_id": stable_id("trace", workload, messages, tools_json, reply, length=24),
        "workload_id": workload,
        "client_id": str(record.get("client_id") or ""),
        "timestamp": _timestamp(record.get("timestamp")),
        "messages": messages,
        "tools_json": tools_json,
        "response": reply,
        "request_json": json.dumps(options, sort_keys=True, default=str),
        "rating": _rating(feedback.get("rating", feedback.get("thumbs"))),
        "corrected": corrected,
        "feedback_json": json.dumps(record["feedback"], sort_keys=True, default=str) if "feedback" in record else "",
    }
