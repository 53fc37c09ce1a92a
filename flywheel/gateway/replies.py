"""What the client gets back: the reply's tool calls, the completion body and its stream.

Tool calls. The model writes calls in its family's format (flywheel.environments.toolkit.tool_formats:
Hermes `<tool_call>{...}</tool_call>`, Llama 3 JSON, Mistral `[TOOL_CALLS]`); `split_reply`
finds them with that format's own parser and returns them as OpenAI `tool_calls`, the text
before the first call as `content` (null when empty). As vLLM's parsers do, a reply whose
calls do not all parse as JSON objects naming one of the request's tools is returned whole
as text, with no calls. With `parallel_tool_calls: false` only the first call is returned.

Streams. The engines return whole samples, so a stream starts once its samples are done
(not incremental: time to first token is the time of the whole reply); it is chunked the
way OpenAI's is (a role chunk, content deltas a token or so apiece, one chunk per tool
call, a finish chunk, the usage chunk when asked, `[DONE]`), and the deltas join to
exactly the text of the non-streamed reply.
"""

from __future__ import annotations

import json
import time

from flywheel.environments.toolkit.tool_formats import ToolFormat

CALL_MARKS = {
    "hermes": ("<tool_call>", "```"),
    "mistral": ("[TOOL_CALLS]",),
    "llama3_json": ("<|python_tag|>", "{"),
}


def split_reply(text: str, fmt: ToolFormat, tool_names: list[str], parallel: bool = True):
    """(content, calls): calls are {"name", "arguments" (JSON text)}; none when the request
    offered no tools or any call is malformed (then content is the whole text)."""
    if not tool_names:
        return text, []
    blocks = fmt.blocks(text)
    if not blocks:
        return text, []
    calls = []
    for block in blocks:
        try:
            obj = json.loads(block)
        except ValueError:
            return text, []
        for item in obj if isinstance(obj, list) else [obj]:
            if not isinstance(item, dict) or item.get("name") not in tool_names:
                return text, []
            args = item.get("arguments", item.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    return text, []
            if not isinstance(args, dict):
                return text, []
            calls.append({"name": item["name"], "arguments": json.dumps(args, ensure_ascii=False)})
    starts = [i for mark in CALL_MARKS.get(fmt.name, ()) if (i := text.find(mark)) >= 0]
    content = text[: min(starts)].strip() if starts else ""
    return (content or None), (calls if parallel else calls[:1])


def response_message(content: str | None, calls: list[dict]) -> dict:
    """The reply in the lake's MESSAGE shape (calls carry their ids)."""
    return {"role": "assistant", "content": content, "tool_calls": calls or None, "tool_call_id": None}


def openai_message(message: dict) -> dict:
    out: dict = {"role": "assistant", "content": message["content"]}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in message["tool_calls"]
        ]
    return out


def logprobs_content(tokenizer, ids: list[int], logprobs: list[float]) -> list[dict]:
    out = []
    for tok, lp in zip(ids, logprobs):
        piece = tokenizer.decode([tok], skip_special_tokens=False)
        out.append({"token": piece, "logprob": float(lp), "bytes": list(piece.encode()), "top_logprobs": []})
    return out


def completion_body(cid: str, model: str, fingerprint: str, choices: list[dict], usage: dict) -> dict:
    """choices: {"message" (lake shape), "finish_reason", "logprobs" (list or None)}."""
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "system_fingerprint": fingerprint,
        "choices": [
            {"index": i, "message": openai_message(c["message"]), "finish_reason": c["finish_reason"],
             "logprobs": None if c["logprobs"] is None else {"content": c["logprobs"], "refusal": None}}
            for i, c in enumerate(choices)
        ],
        "usage": usage,
    }  # fmt: skip


def pieces(tokenizer, ids: list[int]) -> list[tuple[str, int]]:
    """(text delta, tokens consumed so far) in order, joining to exactly the decode of `ids`:
    a delta is emitted once the decoded prefix is stable (no half of a multi-byte character)."""
    final = tokenizer.decode(ids, skip_special_tokens=True)
    out, emitted = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
        if text.endswith("\ufffd") or not text.startswith(emitted) or text == emitted:
            continue
        out.append((text[len(emitted) :], i + 1))
        emitted = text
    if emitted != final:
        if not final.startswith(emitted):  # a tokenizer that rewrites earlier text: one delta, exact
            return [(final, len(ids))]
        out.append((final[len(emitted) :], len(ids)))
    return out


def stream_chunks(tokenizer, cid: str, model: str, fingerprint: str, choices: list[dict],
                  usage: dict | None):  # fmt: skip
    """The SSE lines of a completed reply. choices also carry "token_ids" and "raw_logprobs"."""
    base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "system_fingerprint": fingerprint}  # fmt: skip

    def chunk(index: int, delta: dict, finish=None, logprobs=None) -> str:
        body = {**base, "choices": [{"index": index, "delta": delta, "finish_reason": finish,
                                     "logprobs": logprobs}]}  # fmt: skip
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    for index, c in enumerate(choices):
        message = c["message"]
        yield chunk(index, {"role": "assistant", "content": ""})
        if message.get("tool_calls"):
            if message["content"]:
                yield chunk(index, {"content": message["content"]})
            for k, call in enumerate(message["tool_calls"]):
                fn = {"name": call["name"], "arguments": call["arguments"]}
                yield chunk(
                    index,
                    {"tool_calls": [{"index": k, "id": call["id"], "type": "function", "function": fn}]},
                )
        else:
            done = 0
            for delta, upto in pieces(tokenizer, c["token_ids"]):
                lp = None
                if c["logprobs"] is not None:
                    lp = {"content": c["logprobs"][done:upto], "refusal": None}
                yield chunk(index, {"content": delta}, logprobs=lp)
                done = upto
        yield chunk(index, {}, finish=c["finish_reason"])
    if usage is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"
