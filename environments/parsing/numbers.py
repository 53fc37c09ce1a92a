"""Numbers in answer text and in expected answers, as finite floats or the reason they
are not one: what the `numeric` kind compares and what a numeric row's answer must be.
Never raises: a number beyond float range (1e400, a 400-digit integer) or not finite
(inf, nan) is (None, why), and an exponent is bounded before anything is computed from it."""

from __future__ import annotations

import math
import re
from fractions import Fraction

FLOAT_EXPONENT = re.compile(r"[eE]([+-]?\d+)")
MAX_EXPONENT = 400  # beyond any float's; bounds the work before Fraction builds 10**exponent


def _to_float(text: str) -> tuple[float | None, str]:
    exponent = FLOAT_EXPONENT.search(text)
    if exponent and (len(exponent.group(1)) > 6 or abs(int(exponent.group(1))) > MAX_EXPONENT):
        return None, "beyond float range"
    try:
        return float(Fraction(text)), ""
    except (ValueError, ZeroDivisionError):
        return None, "not a number"
    except OverflowError:
        return None, "beyond float range"


def read_number(text: str) -> tuple[float | None, str]:
    """(the number in `text`, "") or (None, why not): the whole text as a number, else its
    one number ("x = 12", "12 apples"), else none. Never raises."""
    cleaned = re.sub(r"[\s,$%€£]|\\[,!;]", "", str(text)).rstrip(".")
    if cleaned.lower().lstrip("+-") in ("inf", "infinity", "nan", "∞"):
        return None, "not a finite number"
    value, why = _to_float(cleaned)
    if value is not None or why == "beyond float range":
        return value, why
    numbers = re.findall(r"-?\d+(?:\.\d+)?(?:/\d+)?", cleaned)
    if len(numbers) == 1:
        return _to_float(numbers[0])
    return None, "not one number"


def parse_number(text: str) -> float | None:
    return read_number(text)[0]


def finite_number(value) -> tuple[float | None, str]:
    """An expected answer (a JSON number or text) as a finite float, or (None, why): what
    a numeric row's answer must be."""
    if isinstance(value, bool):
        return None, "a boolean is not a number"
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None, "beyond float range"
        return (number, "") if math.isfinite(number) else (None, "not a finite number")
    return read_number(str(value))


def is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
