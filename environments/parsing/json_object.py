"""The last JSON object in a completion, and one of its fields read against what was
expected: what the `extraction` domain and the `json_fields` kind check.

Numbers may come as JSON numbers or as strings ("$1,234.50", "12%"); a string that
holds the right number is right, and `check_field` says it came as a string (the
domain charges the format penalty for it). Strings compare after case-folding and
collapsing whitespace. Not done: nested objects or lists of objects as the answer."""

from __future__ import annotations

import json
import re

REL_TOL = 1e-6  # the tolerance of a number field that names none


def find_last_object(completion: str) -> dict | None:
    """The outermost JSON object that ends last in the text, fenced or bare."""
    decoder, best = json.JSONDecoder(), None
    for m in list(re.finditer(r"\{", completion))[-300:]:
        try:
            obj, end = decoder.raw_decode(completion, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and (best is None or end > best[0]):
            best = (end, obj)
    return None if best is None else best[1]


def _norm(s: str) -> str:
    return " ".join(s.casefold().split()).strip(" .")


def check_field(spec: dict, got) -> tuple[bool, bool]:
    """(right, right but given as a string) for one field; `spec`: {"type": "number" |
    "string", "value", "tol": absolute tolerance or None}."""
    if spec["type"] == "string":
        return isinstance(got, str) and _norm(got) == _norm(spec["value"]), False
    as_string = isinstance(got, str)
    if as_string:
        cleaned = re.sub(r"[$,%\s]|USD", "", got)
        try:
            got = float(cleaned)
        except ValueError:  # not a number at all: simply wrong, no format penalty
            return False, False
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False, False
    want = spec["value"]
    tol = spec["tol"] if spec["tol"] is not None else max(1e-9, REL_TOL * abs(want))
    right = abs(got - want) <= tol + 1e-12
    return right, right and as_string
