"""What a secret pattern needs before it can match, read from the parsed pattern, so the scrubber
runs it only where it may: its bounded repeats (linear time), the literals every match holds
(`required_literals`), windows around those literals (`Gated.matches`), and regexes that find
any of many words at once (`any_of`, `any_of_rare` for the gate in flywheel/production/scrub_detectors.py,
`word_trie`).

Not done: reading literals out of ranges or classes ("[a-z]", "\\d"): a pattern with none runs
over the whole text.
"""

from __future__ import annotations

import re
import re._compiler as sre_compile
import re._constants as sre_c
import re._parser as sre_parse

LOOK_MARGIN = 64  # characters past a possible match's end that a lookahead there may read


REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT)


def bounded(pattern: re.Pattern) -> bool:
    """True when no repeat of the pattern is unbounded (so one match attempt costs a constant)."""
    return _bounded(sre_parse.parse(pattern.pattern, pattern.flags))


def _bounded(items) -> bool:
    for op, arg in items:
        if op in REPEATS:
            if arg[1] == sre_c.MAXREPEAT or not _bounded(arg[2]):
                return False
        elif op is sre_c.SUBPATTERN or op is sre_c.ATOMIC_GROUP:
            if not _bounded(arg[-1] if op is sre_c.SUBPATTERN else arg):
                return False
        elif (
            op is sre_c.BRANCH
            and not all(_bounded(b) for b in arg[1])
            or op in (sre_c.ASSERT, sre_c.ASSERT_NOT)
            and not _bounded(arg[1])
        ):
            return False
    return True


def required_literals(pattern: re.Pattern) -> tuple[str, ...] | None:
    """Strings one of which every match contains (lower-cased for (?i) patterns), read from the
    parsed pattern; None when it has none (the pattern then always runs)."""
    found = _literals(sre_parse.parse(pattern.pattern, pattern.flags))
    if found and pattern.flags & re.IGNORECASE:
        found = tuple(s.lower() for s in found)
    return found


def _literals(items) -> tuple[str, ...] | None:
    best, run = None, ("",)  # run: the strings the items read so far can spell, one of them matched
    for op, arg in [*items, (None, None)]:
        fixed = _fixed([(op, arg)]) if op is not None else None
        if fixed is not None and len(run) * len(fixed) <= MAX_SPELLINGS:  # "(ghp|gho)_" -> ghp_, gho_
            run = tuple(dict.fromkeys(r + f for r in run for f in fixed))
            continue
        options = run if min(map(len, run)) > 0 else None
        run = ("",)
        if op is sre_c.SUBPATTERN:
            options = _better(options, _literals(arg[-1]))
        elif op is sre_c.BRANCH:
            alts = [_literals(b) for b in arg[1]]
            if all(alts):
                options = _better(options, tuple(s for a in alts for s in a))
        elif op in REPEATS and arg[0] >= 1:
            options = _better(options, _literals(arg[2]))
        best = _better(best, options)
    return best


MAX_SPELLINGS = 32


def _fixed(items) -> tuple[str, ...] | None:
    """The strings `items` can match when they are few (literals, small character sets, groups and
    alternations of them); None otherwise."""
    out: tuple[str, ...] = ("",)
    for op, arg in items:
        if op is sre_c.LITERAL:
            alts = (chr(arg),)
        elif op is sre_c.IN and all(o is sre_c.LITERAL for o, _ in arg):
            alts = tuple(chr(a) for _, a in arg)
        elif op is sre_c.SUBPATTERN:
            alts = _fixed(arg[-1])
        elif op is sre_c.BRANCH:
            subs = [_fixed(b) for b in arg[1]]
            alts = None if None in subs else tuple(x for sub in subs for x in sub)
        else:
            return None
        if alts is None or len(out) * len(alts) > MAX_SPELLINGS:
            return None
        out = tuple(o + a for o in out for a in alts)
    return out


def _better(a, b):
    if not a or not b:
        return a or b
    return a if min(map(len, a)) >= min(map(len, b)) else b


class Gated:
    """A pattern, the literals it needs and its shortest match: the pattern runs on a text only
    if one of them is in it and the text is long enough."""

    def __init__(self, pattern: re.Pattern, kind: str):
        self.pattern, self.kind = pattern, kind
        self.literals = required_literals(pattern) or ("",)  # "" is in every text
        self.icase = bool(pattern.flags & re.IGNORECASE)
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
        self.min_len, self.max_len = parsed.getwidth()
        # re scans fast for a pattern that starts with a literal; one that starts with a class,
        # an alternation or (?i) is tried at every character (~20 ns each): such a pattern runs
        # only in windows around its literal, found with str.find (see `matches`)
        self.windowed = (
            self.max_len < sre_c.MAXREPEAT
            and all(self.literals)
            and not sre_compile._get_literal_prefix(parsed, pattern.flags)[0]
        )

    def matches(self, text: str, low: str):
        """The pattern's matches in `text`, the same as `finditer` over the whole text: every
        match holds one of the literals, so it lies in [q - max_len, q + len + max_len) around an
        occurrence q; windows that overlap or touch are merged, and each reaches LOOK_MARGIN past
        that for a lookahead at a match's end (re reads before a window's start by itself)."""
        hay = low if self.icase else text
        if not self.windowed or (self.icase and len(low) != len(text)):
            return self.pattern.finditer(text)
        width = self.max_len
        present = [(lit, n) for lit in self.literals if (n := hay.count(lit))]
        if sum(n for _, n in present) * width >= len(text):  # windows would cover the text
            return self.pattern.finditer(text)
        starts = sorted(q for lit, _ in present for q in _find_all(hay, lit))
        windows: list[list[int]] = []
        for q in starts:
            lo, hi = q - width, q + width + LOOK_MARGIN + max(map(len, self.literals))
            if windows and lo <= windows[-1][1]:
                windows[-1][1] = hi
            else:
                windows.append([max(0, lo), hi])
        return (m for lo, hi in windows for m in self.pattern.finditer(text, lo, hi))


def candidates(gated: list[Gated], text: str, low: str) -> list[Gated]:
    """The patterns that may match `text`: one `in` per distinct literal, not per pattern."""
    exact, lower = _INDEX.get(id(gated)) or _INDEX.setdefault(id(gated), _build_index(gated))
    found = [g for lit, group in exact if lit in text for g in group]
    found += [g for lit, group in lower if lit in low for g in group]
    n = len(text)
    return [g for g in dict.fromkeys(found) if g.min_len <= n]


_INDEX: dict[int, tuple[list, list]] = {}


def _build_index(gated: list[Gated]) -> tuple[list, list]:
    """(literal, patterns) pairs, case-sensitive ones and lower-cased ones apart."""
    index: dict[tuple[str, bool], list[Gated]] = {}
    for g in gated:
        for literal in g.literals:
            index.setdefault((literal, g.icase), []).append(g)
    return [(lit, gs) for (lit, ic), gs in index.items() if not ic], [
        (lit, gs) for (lit, ic), gs in index.items() if ic
    ]


def any_of(words) -> str:
    """A regex that finds any of `words`, as a trie ("a(?:ws|uth)"): re tries one branch per
    character instead of one per word (~2x faster); a word holding another is left out."""
    words = {w for w in words if not any(o != w and o in w for o in words)}
    tree: dict = {}
    for w in words:
        node = tree
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # a word ends here (and, being minimal, no longer one goes on)

    def emit(node: dict) -> str:
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        return alts[0] if len(alts) == 1 else f"(?:{'|'.join(alts)})" if alts else ""

    return emit(tree)


def word_trie(words) -> str:
    """The alternation of `words` (every one kept: a word may be followed by what rules out a
    shorter one), as a trie: re tries one branch per character, not one per word."""
    tree: dict = {}
    for w in words:
        node = tree
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # a word ends here; longer ones may go on

    def emit(node: dict) -> str:
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if alts and "" in node:
            alts.append("")
        return alts[0] if len(alts) == 1 else f"(?:{'|'.join(alts)})" if alts else ""

    return emit(tree)


# characters from the most common in trace text to the least; any other (capitals, '_', 'J', other
# scripts) is rarer still. Only speed depends on this order.
COMMON_CHARS = " etaoinsrhldcu.m,wfgy-pb0123456789v:kjxqz/"


def any_of_rare(words) -> str:
    """A regex that finds something exactly where `any_of(words)` does (it finds a word, or it finds
    nothing), searched from each word's rarest character: "eyJ" as "J(?<=eyJ)", "ghp_" as
    "_(?<=ghp_)". re then stops only at those characters (~2x fewer stops in prose than at the
    words' first letters, many of them 'e', 's', 't'). Its matches' spans are not the words'."""
    words = {w for w in words if not any(o != w and o in w for o in words)}
    by_anchor: dict[str, list[str]] = {}
    for w in sorted(words):
        i = max(range(len(w)), key=lambda j: (_rarity(w[j]), -j))  # the rarest, the first of equals
        behind = f"(?<={re.escape(w[: i + 1])})" if i else ""
        by_anchor.setdefault(w[i], []).append(behind + re.escape(w[i + 1 :]))
    return "|".join(
        re.escape(c) + (f"(?:{'|'.join(rest)})" if len(rest) > 1 else rest[0])
        for c, rest in by_anchor.items()
    )


def _rarity(ch: str) -> int:
    i = COMMON_CHARS.find(ch)
    return len(COMMON_CHARS) if i < 0 else i


def _find_all(text: str, literal: str):
    i = text.find(literal)
    while i >= 0:
        yield i
        i = text.find(literal, i + 1)
