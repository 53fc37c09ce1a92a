"""The OpenAI chat-completions request, read strictly: what the gateway serves, and a clear
4xx for everything else.

`parse_chat_request(body, config)` turns the JSON body into a `ChatRequest` or raises a
`GatewayError` carrying the HTTP status and OpenAI's error shape
(`{"error": {"message", "type", "param", "code"}}`), which SDKs turn into their own
exceptions (`openai.BadRequestError`, ...).

Served: model, messages (system/developer, user, assistant with tool_calls, tool; text
content or text parts), tools (functions), tool_choice "auto" or "none", stream (with
stream_options.include_usage), n, stop (up to 4 strings), temperature, top_p, max_tokens /
max_completion_tokens, seed, logprobs (the sampled token's; top_logprobs 0), user,
metadata, parallel_tool_calls; store and service_tier are accepted and ignored.

Refused, saying why (the engines sample freely, so nothing can constrain a reply):
tool_choice "required" or a named function, response_format other than text, logit_bias,
non-zero presence/frequency penalties, top_logprobs > 0, the legacy functions /
function_call, audio and image content, and any parameter this module does not know.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

ROLES = {"system", "developer", "user", "assistant", "tool"}
IGNORED = {"store", "service_tier"}
UNSUPPORTED = {
    "functions": "the legacy `functions` parameter is not served: pass `tools`",
    "function_call": "the legacy `function_call` parameter is not served: pass `tool_choice`",
    "audio": "audio output is not served",
    "modalities": "only text output is served",
    "prediction": "predicted outputs are not served",
    "web_search_options": "web search is not served",
    "reasoning_effort": "reasoning_effort is not served",
    "verbosity": "verbosity is not served",
}


class GatewayError(Exception):
    """An error the client gets as JSON in OpenAI's shape, with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, "invalid_request_error", param, code)


@dataclass
class ChatRequest:
    model: str
    messages: list[dict]  # normalised: {"role", "content": str, "tool_calls": [...] | None, "tool_call_id"}
    tools: list[dict] | None = None  # OpenAI function tools as sent
    tool_choice: str = "auto"  # "auto" or "none"
    stream: bool = False
    include_usage: bool = False
    n: int = 1
    stop: list[str] = field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    seed: int | None = None
    logprobs: bool = False
    parallel_tool_calls: bool = True
    user: str | None = None
    metadata: dict = field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools or []]

    def options(self) -> dict:
        """What the lake keeps of the request besides its messages and tools."""
        keys = ("model", "tool_choice", "stream", "n", "stop", "temperature", "top_p", "max_tokens", "seed",
                "logprobs", "parallel_tool_calls", "user", "metadata")  # fmt: skip
        return {k: getattr(self, k) for k in keys}


def parse_chat_request(body, max_n: int = 8) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    for key in body:
        if key in UNSUPPORTED:
            raise bad(f"{UNSUPPORTED[key]} (flywheel gateway)", key, "unsupported_parameter")
    known = set(ChatRequest.__dataclass_fields__) | IGNORED | {
        "messages", "stream_options", "max_completion_tokens", "top_logprobs", "response_format",
        "logit_bias", "presence_penalty", "frequency_penalty",
    }  # fmt: skip
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad(f"unknown parameter(s): {', '.join(unknown)}", unknown[0], "unknown_parameter")
    _refuse_constraints(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("`model` is required (a string)", "model")
    req = ChatRequest(model=model, messages=_messages(body.get("messages")))
    req.tools = _tools(body.get("tools"))
    req.tool_choice = _tool_choice(body.get("tool_choice"), req.tools)
    req.stream = _bool(body, "stream", False)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
        raise bad("stream_options takes only include_usage", "stream_options")
    req.include_usage = bool(options.get("include_usage", False))
    req.n = _int(body, "n", 1, 1, max_n)
    req.stop = _stop(body.get("stop"))
    req.temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    req.top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if req.top_p == 0:
        raise bad("top_p must be above 0", "top_p")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    req.max_tokens = None if limit is None else _int({"max_tokens": limit}, "max_tokens", None, 1, 1 << 20)
    seed = body.get("seed")
    req.seed = None if seed is None else _int(body, "seed", None, -(1 << 63), 1 << 63)
    req.logprobs = _bool(body, "logprobs", False)
    req.parallel_tool_calls = _bool(body, "parallel_tool_calls", True)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise bad("`user` must be a string", "user")
    req.user = user or None
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad("`metadata` must be an object of strings", "metadata")
    req.metadata = metadata
    return req


def _refuse_constraints(body: dict) -> None:
    if body.get("top_logprobs") not in (None, 0):
        raise bad("top_logprobs is not served: the engines return only the sampled token's log-probability "
                  "(logprobs: true)", "top_logprobs", "unsupported_parameter")  # fmt: skip
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad("response_format is not served: the engines cannot constrain a reply to a format or schema",
                  "response_format", "unsupported_parameter")  # fmt: skip
    if body.get("logit_bias"):
        raise bad("logit_bias is not served", "logit_bias", "unsupported_parameter")
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise bad(
                f"{key} is not served: the policy samples as it was trained", key, "unsupported_parameter"
            )


def _bool(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(f"`{key}` must be true or false", key)
    return value


def _int(body: dict, key: str, default, low: int, high: int):
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad(f"`{key}` must be an integer from {low} to {high}", key)
    return value


def _number(body: dict, key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:  # fmt: skip
        raise bad(f"`{key}` must be a number from {low} to {high}", key)
    return float(value)


def _stop(value) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise bad("`stop` must be a non-empty string or a list of up to 4 of them", "stop")
    return stops


def _text(content, where: str) -> str:
    """A message's content as text: a string, null, or text parts (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad(
                    f"{where}: only text content is served, not {kind!r}", "messages", "unsupported_content"
                )
            out.append(str(part.get("text", "")))
        return "".join(out)
    raise bad(f"{where}: content must be a string or a list of text parts", "messages")


def _messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise bad("`messages` must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise bad(f"{where}: a message is an object with a role in {sorted(ROLES)}", "messages")
        role = "system" if m["role"] == "developer" else m["role"]
        calls = None
        if m.get("tool_calls"):
            if role != "assistant" or not isinstance(m["tool_calls"], list):
                raise bad(f"{where}: tool_calls belong to assistant messages, as a list", "messages")
            calls = [_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(m["tool_calls"])]
        tool_call_id = m.get("tool_call_id")
        if tool_call_id is not None and not isinstance(tool_call_id, str):
            raise bad(f"{where}: tool_call_id must be a string", "messages")
        out.append({"role": role, "content": _text(m.get("content"), where), "tool_calls": calls,
                    "tool_call_id": tool_call_id if role == "tool" else None})  # fmt: skip
    return out


def _call(c, where: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(
            f"{where}: a tool call is {{id, type: function, function: {{name, arguments}}}}", "messages"
        )
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        args = json.dumps(args)
    return {"id": str(c.get("id") or ""), "name": fn["name"], "arguments": args}


def _tools(value) -> list[dict] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise bad("`tools` must be a list", "tools")
    for i, t in enumerate(value):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:  # fmt: skip
            raise bad(
                f"tools[{i}]: only function tools are served ({{type: function, function: {{name, ...}}}})",
                "tools",
            )
    return value


def _tool_choice(value, tools) -> str:
    if value in (None, "auto"):
        return "auto"
    if value == "none":
        return "none"
    if value == "required" or isinstance(value, dict):
        raise bad("tool_choice 'required' or a named function is not served: the engines cannot force a call "
                  "(use 'auto' and check the reply)", "tool_choice", "unsupported_parameter")  # fmt: skip
    raise bad("tool_choice must be 'auto' or 'none'", "tool_choice")
