"""How a model family writes tool calls: Hermes/Qwen, Llama 3 JSON, Mistral.

Each `ToolFormat` says three things: what the system prompt tells the model (only where
the chat template cannot take `tools=` itself), how a call is written (SFT references,
scripted episodes) and where the calls are in a reply (`blocks`; the JSON in them is
checked by `flywheel.environments.toolkit.tools.parse_tool_calls`, the same for every format).

- **hermes** (Hermes, Qwen 2/2.5/3, SmolLM2 as prompted here):
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call; a
  fenced ```json block is taken when no tag is present.
- **llama3_json** (Llama 3.1/3.2/3.3's JSON tool calling): the reply is the call,
  `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`; several calls
  separated by `;`.
- **mistral**: `[TOOL_CALLS]` then a JSON list of `{"name", "arguments"}` (tokenizer v3
  to v7), or `[TOOL_CALLS]name[ARGS]{...}` per call (v11 and later).

`pick(tokenizer, name)` takes the format a config names, or with "auto" reads the model's
chat template: `[TOOL_CALLS]` means mistral, `<|python_tag|>` or Llama's "Environment:
ipython" means llama3_json, anything else hermes. A reply in a format the parser does
not know yields no calls (the runner records "no tool call in the reply" as an invalid
call), never a crash.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod

FORMATS = ("hermes", "llama3_json", "mistral")
DONE = "Call submit when you are done."  # how an episode ends, unless the domain says otherwise


class ToolFormat(ABC):
    name = ""
    how_to_call = ""  # the sentence of the system prompt that shows the call syntax
    no_call_hint = ""  # the observation's hint after a reply that called nothing

    @abstractmethod
    def blocks(self, text: str) -> list[str]:
        """The JSON texts of the calls in `text`, in order (each an object or a list)."""

    @abstractmethod
    def render(self, calls: list[dict]) -> str:
        """Assistant text making `calls` ({"name", "arguments"}), as the model should write it."""

    def system_prompt(self, intro: str, specs: list[dict], template_has_tools: bool, done: str = DONE) -> str:
        """The system prompt: with the tool specs in it unless the template renders them;
        `done`: its last sentence, how the model ends."""
        if template_has_tools:
            return f"{intro}\n\n{self.how_to_call} Each result comes back in the next message. {done}"
        listed = "\n".join(json.dumps(s) for s in specs)
        return (
            f"{intro}\n\nYou can call these tools:\n<tools>\n{listed}\n</tools>\n\n{self.how_to_call}\n"
            f"You may make several calls in one reply. Each result comes back in the next message. {done}"
        )


class Hermes(ToolFormat):
    name = "hermes"
    no_call_hint = "call a tool inside <tool_call></tool_call> tags"
    how_to_call = (
        "To call a tool, reply with a JSON object inside <tool_call></tool_call> tags:\n"
        '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call>'
    )
    BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
    FENCE = re.compile(r"```(?:json)?[^\n]*\n(.*?)```", re.DOTALL)

    def blocks(self, text):
        found = [b.strip() for b in self.BLOCK.findall(text)]
        if not found:  # a fenced block only when no tag is present: a quoted example is not a call
            found = [b.strip() for b in self.FENCE.findall(text) if '"name"' in b]
        return [re.sub(r"^```(?:json)?\s*|\s*```$", "", b) for b in found]

    def render(self, calls):
        return "\n".join(f"<tool_call>{_call_json(c, 'arguments')}</tool_call>" for c in calls)


class Llama3Json(ToolFormat):
    name = "llama3_json"
    no_call_hint = "reply with only the call's JSON object"
    how_to_call = (
        "To call a tool, reply with only a JSON object of the form "
        '{"name": "<tool name>", "parameters": {<arguments>}}; several calls are separated by ";".'
    )

    def blocks(self, text):
        body = text.split("<|python_tag|>", 1)[-1].strip()
        body = body.removesuffix("<|eom_id|>").removesuffix("<|eot_id|>").strip()
        if not body.startswith("{"):
            return []
        return [part.strip() for part in _split_top_level(body, ";") if part.strip()]

    def render(self, calls):
        return "; ".join(_call_json(c, "parameters") for c in calls)


class Mistral(ToolFormat):
    name = "mistral"
    no_call_hint = "reply with [TOOL_CALLS] and a JSON list of calls"
    how_to_call = (
        'To call tools, reply with [TOOL_CALLS] followed by a JSON list: [TOOL_CALLS] [{"name": "<tool name>", '
        '"arguments": {<arguments>}}]'
    )
    V11 = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z_][\w.-]*)\s*\[ARGS\]")

    def blocks(self, text):
        if "[TOOL_CALLS]" not in text:
            return []
        if self.V11.search(text):  # name[ARGS]{...} per call
            out = []
            for m in self.V11.finditer(text):
                args, _ = _first_json(text[m.end() :])
                out.append(
                    json.dumps({"name": m.group(1), "arguments": args})
                    if args is not None
                    else text[m.end() :]
                )
            return out
        body = text.split("[TOOL_CALLS]", 1)[1].strip().removesuffix("</s>").strip()
        return [body]

    def render(self, calls):
        return "[TOOL_CALLS] [" + ", ".join(_call_json(c, "arguments") for c in calls) + "]"


def _call_json(call: dict, key: str) -> str:
    return json.dumps({"name": call["name"], key: call.get("arguments", {})}, sort_keys=True)


def _first_json(text: str):
    try:
        return json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return None, 0


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on `sep` outside JSON strings and brackets."""
    parts, depth, start, in_str, escaped = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            escaped, in_str = (not escaped and ch == "\\"), in_str and (escaped or ch != '"')
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


BY_NAME = {f.name: f for f in (Hermes(), Llama3Json(), Mistral())}


def detect(chat_template: str | None) -> ToolFormat:
    """The format a chat template's family writes (hermes when it says nothing of tools)."""
    template = chat_template or ""
    if "[TOOL_CALLS]" in template:
        return BY_NAME["mistral"]
    if "<|python_tag|>" in template or "Environment: ipython" in template:
        return BY_NAME["llama3_json"]
    return BY_NAME["hermes"]


def pick(tokenizer, name: str = "auto") -> ToolFormat:
    """The configured format, or with "auto" the one the tokenizer's chat template implies."""
    if name == "auto":
        template = getattr(tokenizer, "chat_template", None)
        return detect(template if isinstance(template, str) else json.dumps(template))
    if name not in BY_NAME:
        raise ValueError(f"unknown tool-call format {name!r}; known: auto, {', '.join(FORMATS)}")
    return BY_NAME[name]


def template_has_tools(tokenizer) -> bool:
    """Whether the chat template renders a `tools=` list (many ignore it silently)."""
    probe = [
        {"type": "function", "function": {"name": "probe_tool_7f3a", "description": "d", "parameters": {}}}
    ]
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}], tools=probe, tokenize=False)
    except Exception:  # noqa: BLE001  (a template may reject tools in its own way)
        return False
    return "probe_tool_7f3a" in text
