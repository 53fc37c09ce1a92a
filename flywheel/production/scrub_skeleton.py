"""A text's skeleton: one character for one, look-alikes read as the ASCII they imitate.

Detectors run on the skeleton and their spans apply to the text itself (same length), so a
secret written with Cyrillic "р", Greek "ο", full-width or mathematical letters, other scripts'
digits, Unicode dashes or spaces is found, and the stored text keeps its own characters.
The look-alikes come from confusable-homoglyphs' data (Unicode's confusables list); digits,
dashes and spaces from unicodedata. Not done: look-alikes that stand for two characters
(ligatures such as "ﬁ"); they are read as they are.
"""

from __future__ import annotations

import re
import unicodedata

from confusable_homoglyphs import confusables


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for char, entries in confusables.confusables_data.items():
        if len(char) == 1 and not char.isascii():
            ascii_ = [
                e["c"] for e in entries if len(e["c"]) == 1 and e["c"].isascii() and e["c"].isprintable()
            ]
            if ascii_:
                table[ord(char)] = ascii_[0]
    table.update({code: chr(code - 0xFEE0) for code in range(0xFF01, 0xFF5F)})  # full-width ASCII
    for code in range(0x80, 0x10000):
        char = chr(code)
        if (digit := unicodedata.decimal(char, None)) is not None:
            table[code] = str(digit)
        elif unicodedata.category(char) == "Pd" or char == "\u2212":
            table[code] = "-"
        elif unicodedata.category(char) == "Zs":
            table[code] = " "
    return table


SKELETON = _table()


NON_ASCII = re.compile(r"[^\x00-\x7f]{1,4096}")


def _class(codes) -> str:
    """A regex character class of these code points, as ranges."""
    ranges: list[list[int]] = []
    for code in sorted(codes):
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges) + "]"


# a character the skeleton may change: one of the BMP's look-alikes (a class re tests in one step)
# or any character past the BMP (a list of ranges there would cost more than the search saves)
LOOK_ALIKE = re.compile(_class(c for c in SKELETON if c < 0x10000) + "|[\\U00010000-\\U0010ffff]")


def skeleton(text: str) -> str:
    """Only the non-ASCII runs are translated: str.translate on a whole text costs ~10x more; a text
    without a look-alike (most French, German or Japanese prose) is its own skeleton: one search."""
    if text.isascii() or not LOOK_ALIKE.search(text):
        return text
    return NON_ASCII.sub(lambda m: m.group().translate(SKELETON), text)


def with_skeletons(words: str) -> str:
    """A regex alternation of words, plus each word's skeleton where it differs ("пароль")."""
    parts = words.split("|")
    return "|".join(dict.fromkeys(parts + [skeleton(w) for w in parts]))
