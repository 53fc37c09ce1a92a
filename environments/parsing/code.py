"""The code in a completion: the fenced block that defines the function asked for, else
the last fenced block, else bare code from `def <entry>` on. Read by every verifier of
written code (the `code` and `data` domains, the `python_tests` and `python_io` kinds,
the row checks); never run here."""

from __future__ import annotations

import re

CODE_BLOCK = re.compile(r"```(?:python|py)?[^\n]*\n(.*?)(?:```|$)", re.DOTALL)


def extract_code(completion: str, entry: str) -> str | None:
    """The last fenced block that defines `entry`, else any fenced block, else bare code
    from `def entry` on. None when the completion holds no code."""
    blocks = CODE_BLOCK.findall(completion)
    for block in reversed(blocks):
        if f"def {entry}" in block:
            return block
    if blocks and blocks[-1].strip():
        return blocks[-1]
    idx = completion.find(f"def {entry}")
    return completion[idx:] if idx >= 0 else None
