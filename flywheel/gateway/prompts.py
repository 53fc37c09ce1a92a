"""A request's messages to the token ids the engine is prompted with.

Two ways, and the lake records which (`continued`):

- **Continued**: the call's messages extend an earlier call's messages and one of its
  replies (the agent appended the reply and the tool results, as agent loops do). The
  prompt is that call's prompt ids, the reply's sampled ids as they came out, then the ids
  of the text the chat template adds after the reply (end of turn, the new messages, the
  next assistant header), as tasks/multiturn.py builds a multi-turn trajectory. So a
  session's last call holds one token sequence in which every assistant token is the
  engine's own, which is what RL needs; a re-encoding of the chat would not be (the
  template re-renders the reply's tool calls, and the tokenizer may split text otherwise).
- **Fresh**: anything else. The messages are rendered by the chat template: an assistant
  message's tool calls are written back in the model's format after its text, tool
  results become `tool` messages (or user messages "Tool result: ..." where the template
  has no tool role), and the request's tools go to the template's `tools=` where it renders
  them, else into the system prompt with the format's instruction for calling them.

With tool_choice "none" the tools are not shown to the model at all.
"""

from __future__ import annotations

import json

from flywheel.environments.toolkit.tool_formats import ToolFormat, pick, template_has_tools


class Prompter:
    def __init__(self, tokenizer, tool_format: str = "auto"):
        self.tok = tokenizer
        self.fmt: ToolFormat = pick(tokenizer, tool_format)
        self.takes_tools = template_has_tools(tokenizer)
        self.tool_role = _has_tool_role(tokenizer)

    def chat(
        self, messages: list[dict], tools: list[dict] | None, raw: dict[int, str] | None = None
    ) -> list[dict]:
        """The messages as the template gets them; raw: message index -> the model's own text
        of that reply (used in place of its content and tool calls)."""
        out = []
        for i, m in enumerate(messages):
            role, content = m["role"], m.get("content") or ""
            if raw and i in raw:
                content = raw[i]
            elif m.get("tool_calls"):
                calls = [{"name": c["name"], "arguments": _args(c["arguments"])} for c in m["tool_calls"]]
                content = (content + "\n" if content else "") + self.fmt.render(calls)
            if role == "tool" and not self.tool_role:
                role, content = "user", "Tool result:\n" + content
            out.append({"role": role, "content": content})
        if tools and not self.takes_tools:
            listing = self.tool_listing(tools)
            if out and out[0]["role"] == "system":
                out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{listing}".lstrip()}
            else:
                out.insert(0, {"role": "system", "content": listing})
        return out

    def tool_listing(self, tools: list[dict]) -> str:
        listed = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
        return (
            f"You can call these tools:\n<tools>\n{listed}\n</tools>\n\n{self.fmt.how_to_call}\n"
            "You may make several calls in one reply. Each result comes back in the next message."
        )

    def render(self, chat: list[dict], tools: list[dict] | None, generation: bool) -> str:
        extra = {"tools": tools} if tools and self.takes_tools else {}
        return self.tok.apply_chat_template(chat, add_generation_prompt=generation, tokenize=False, **extra)

    def ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []

    def fresh(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return self.ids(self.render(self.chat(messages, tools), tools, True))

    def continued(self, sequence: list[int], messages: list[dict], reply_at: int, reply_text: str,
                  tools: list[dict] | None) -> list[int]:  # fmt: skip
        """`sequence` (the parent call's prompt and reply ids) and the ids of what the template
        adds after the reply at `messages[reply_at]` (the model's own text `reply_text`)."""
        chat = self.chat(messages, tools, {reply_at: reply_text})
        after = self.render(chat, tools, True)
        so_far = self.tok.decode(sequence, skip_special_tokens=False)
        if after.startswith(so_far):
            delta = after[len(so_far) :]
        else:  # the template rewrote the reply's text: close the turn as the template would
            through = self.render(chat[: reply_at + 1 + (len(chat) - len(messages))], tools, False)
            common = 0
            while common < min(len(after), len(through)) and after[common] == through[common]:
                common += 1
            delta = after[common:]
        return list(sequence) + self.ids(delta)


def _args(arguments: str):
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments  # written back as the client sent it


def _has_tool_role(tokenizer) -> bool:
    """Whether the chat template renders a tool message (some raise, some drop it)."""
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
             {"role": "tool", "content": "tool-probe-7f3a"}]  # fmt: skip
    try:
        return "tool-probe-7f3a" in tokenizer.apply_chat_template(
            probe, add_generation_prompt=True, tokenize=False
        )
    except Exception:  # noqa: BLE001  (templates reject unknown roles in many ways)
        return False
