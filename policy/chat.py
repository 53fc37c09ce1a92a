"""Chat messages to prompt token ids, one way for every stage.

Rendering to text first and then tokenizing without special tokens gives the same ids
in transformers 4 and 5 (whose `apply_chat_template(tokenize=True)` return types differ).
"""

from __future__ import annotations


def encode_chat(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    extra = {"tools": tools} if tools else {}  # only then: not every tokenizer takes the argument
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
