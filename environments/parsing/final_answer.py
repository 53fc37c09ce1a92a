"""The final answer of a completion, for the kinds that compare an answer (exact,
numeric, regex; math's refusal check): the last <answer>...</answer>, else the last
`Answer:` line, else the last \\boxed{...}, else the last non-empty line; and the
normal form two answers are compared in (case, spaces, quotes, a final period)."""

from __future__ import annotations

import re

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
ANSWER_LINE = re.compile(r"^[\s*>#_`]*answer[\s*_`]*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def extract_answer(completion: str) -> str | None:
    tags = ANSWER_TAG.findall(completion)
    if tags:
        return tags[-1].strip()
    lines = ANSWER_LINE.findall(completion)
    if lines:
        return lines[-1].strip()
    boxed = _last_boxed(completion)
    if boxed is not None:
        return boxed.strip()
    rest = [ln.strip() for ln in completion.splitlines() if ln.strip()]
    return rest[-1] if rest else None


def normalise(text: str) -> str:
    text = " ".join(str(text).casefold().split())
    text = text.strip().strip("`'\"$").strip()
    return text[:-1].rstrip() if text.endswith(".") else text
