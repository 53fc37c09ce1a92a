"""Personal data in a text: emails, phone numbers, card numbers and IBANs, as (start, end, kind).

Each candidate is validated by the field's library rather than by its look: `phonenumbers` for
phone numbers (any region when written with + or 00; national formats against GUESS_REGIONS),
`python-stdnum` for IBANs (mod-97) and card numbers (Luhn, 14-19 digits, a card network's
prefix). Kept: dates, times, amounts, versions, IP addresses, git SHAs, and bare digit runs (order
ids, timestamps) unless a word such as "phone" or "call" comes just before them.

Fast and linear: one bounded pattern finds the runs of digits (a text without digits costs one
count); each run is sorted once into what it may be, and each number pattern runs only in windows
around the runs that may hold its kind (`find_personal` says why each test is safe); emails only
around an '@'.

Not done: names and street addresses (an NER model's job), numbers written in words, national
numbers of regions outside GUESS_REGIONS written without + or 00.
"""

from __future__ import annotations

import re
from functools import lru_cache

import phonenumbers
from stdnum import iban, luhn

from flywheel.production.scrub_patterns import word_trie
from flywheel.production.scrub_skeleton import with_skeletons

# national formats (no + or 00) are tried in these regions, most-used first; all 245 would
# accept nearly any digit string (a date is a valid number in DE, SE, TH and IL)
GUESS_REGIONS = ("US", "GB", "DE", "FR", "IN", "BR", "JP", "ES", "IT", "MX", "CA", "AU", "NL", "CN", "RU",
                 "KR", "PL", "TR", "SE", "CH", "AT", "BE", "PT", "IE", "ZA", "AR", "CO", "NG", "PH", "ID")  # fmt: skip
MARGIN = 40  # characters around a run of digits that the number patterns may still need
GAP = 2000  # runs of digits this close share one window: one long window costs less than many short ones
SMALL_GAP = 200  # the same for the card and phone windows, around far fewer runs

EMAIL = re.compile(r"[\w.%+-][\w.%+'-]{0,63}@[\w-]{1,63}(?:\.[\w-]{1,63}){0,8}\.[^\W\d_]{2,24}(?![\w-])")
# where a number may be: 7 digits or more. Possessive: a separator is no digit, so backtracking
# never finds another match (~25% faster)
DIGIT_RUN = re.compile(r"[0-9](?:[ ().\-/]{0,3}+[0-9]){6,40}+")
CARD = re.compile(r"\d(?<![\d.,]\d)(?:[ -]?\d){13,18}(?!\d)")  # lookbehind after \d: a fast first char
# from the check digits (a fast first character), the country code looked for behind them
IBAN = re.compile(
    r"[0-9]{2}(?<=[A-Za-z]{2}[0-9]{2})(?<![A-Za-z0-9][A-Za-z]{2}[0-9]{2})(?:[ -]?[A-Za-z0-9]){10,30}(?![A-Za-z0-9])"
)
# 7+ digits written as a phone number: after + or (, or a first group of at most 6 digits; a bare
# run of digits is a number only after a phone word (find_personal)
PHONE = re.compile(
    r"(?:\+|\(|[0-9](?=[0-9]{0,5}[ ().\-/])(?![0-9]{3}[-/.][0-9]{1,2}[-/.][0-9]{1,2}(?![0-9])))"  # not a date
    r"(?<![\w+.,/-].)\(?[0-9]?(?:[ ().\-/]{1,3}[0-9]|[0-9]){6,16}(?!\w)"
)
DATE_SHAPE = re.compile(r"\(?(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4})(?!\d)")
IP_SHAPE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
PHONE_WORD_LIST = with_skeletons("tel|phone|call|mobile|cell|fax|whatsapp|sms|handy|telefon|telefono|"
                                 "téléphone|portable|número|numero|nummer|номер|電話|电话").split("|")  # fmt: skip
# as a trie: searched in the 24 characters before each bare run of digits, ~2x faster than the list
PHONE_WORDS = re.compile("(?i)(?:" + word_trie(PHONE_WORD_LIST) + r")\W{0,12}$")
DATE_RUN = re.compile(r"[0-9]{4}[-/.][0-9]{1,2}[-/.][0-9]{1,2}")  # the dates PHONE's lookahead excludes
OTHER_DIGIT = re.compile(r"[^\D0-9]")  # a digit that is not ASCII
ASCII_DIGITS = b"0123456789"
PATTERNS = (EMAIL, DIGIT_RUN, CARD, IBAN, PHONE, DATE_SHAPE, IP_SHAPE, PHONE_WORDS, DATE_RUN, OTHER_DIGIT)


def find_personal(text: str) -> list[tuple[int, int, str]]:
    spans = _emails(text) if "@" in text else []
    # fewer than 7 digits: no number (other scripts' digits: no shortcut); bytes.translate counts them
    # ~4x faster than ten str.count
    if not text.isascii() or len(text) - len(text.encode().translate(None, ASCII_DIGITS)) >= 7:
        runs, cards, phones, last = [], [], [], -9
        # CARD reads \d: with digits of other scripts (that the skeleton left) it runs where it did
        # before, in every window with a long run
        any_card = not text.isascii() and OTHER_DIGIT.search(text) is not None
        for m in DIGIT_RUN.finditer(text):
            start, end = m.span()
            run = m.group()
            window = (start - MARGIN, end + MARGIN)
            runs.append((*window, end - start >= 12))
            # a card is 14-19 digits with single separators: inside one run, or past a run cut at 41
            # digits by less than MARGIN; both runs have 14 digits or more
            if run.isdigit():  # most runs; _bare_phone's and _phone_free's first tests inline
                if end - start <= 15 and _bare_phone(text, m):
                    spans.append((start, end, "phone"))
                if end - start >= 14:
                    cards.append(window)
                before = text[max(0, start - 5) : start]
                if start - last <= 3 or "+" in before or "(" in before:  # or it goes on a run cut at 41
                    phones.append(window)
            else:
                if end - start >= 14 and len(run.translate(SEPARATORS)) >= 14:
                    cards.append(window)
                if start - last <= 3 or not _phone_free(text, start, run, False):
                    phones.append(window)
            last = end
        if runs and len(text) <= GAP:  # every run within GAP of the next: one window, as _windows makes
            windows = [[max(0, runs[0][0]), runs[-1][1], any(r[2] for r in runs)]]
        else:
            windows = _windows(runs, gap=GAP)
        # the order of kinds is the old one (cards, IBANs, phones): Scrubber.spans keeps the first of
        # two equal spans
        card_windows = [w[:2] for w in windows if w[2]] if any_card else _windows(cards, gap=SMALL_GAP)
        for lo, hi in card_windows:
            spans += _cards(text, lo, hi)
        for lo, hi, long in windows:  # IBANs have 11+ characters after the check digits
            spans += _ibans(text, lo, hi) if long else []
        for lo, hi in _windows(phones, gap=SMALL_GAP):
            spans += _phones(text, lo, hi)
    return spans


def _phone_free(text: str, start: int, run: str, bare: bool) -> bool:
    """True when no PHONE match can overlap this run (one that does not go on the run before it,
    cut at 41 digits): it is bare digits or a date (yyyy-mm-dd),
    holds no '(' and has no '+' or '(' in the 5 characters before it. PHONE's first character is
    '+', '(' or a digit; one before the run is at most 5 characters before it ('+', '(', up to 3
    separators) or joins the run; one inside it is a digit after ' ', '(' or ')' (its lookbehind),
    which a bare or date run has only at its start, where a bare run has no separator within 6
    digits (PHONE's lookahead) and a date is excluded by PHONE's own date lookahead."""
    if not (bare or DATE_RUN.fullmatch(run)) or "(" in run:
        return False
    before = text[max(0, start - 5) : start]
    return "+" not in before and "(" not in before


def _windows(ranges, gap: int = 0) -> list[list]:
    """Ranges (sorted by start) merged where they overlap or lie within `gap` of each other: one
    long window costs the number patterns less than many short ones."""
    out: list[list] = []
    for lo, hi, *flag in ranges:
        if out and lo <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], hi)
            out[-1][2:] = [a or b for a, b in zip(out[-1][2:], flag)]
        else:
            out.append([max(0, lo), hi, *flag])
    return out


def _emails(text: str) -> list[tuple[int, int, str]]:
    spans, at = [], text.find("@")
    ranges = []
    while at >= 0:
        ranges.append((at - 64, at + 700))
        at = text.find("@", at + 1)
    for lo, hi in _windows(ranges):
        spans += [(m.start(), m.end(), "email") for m in EMAIL.finditer(text, lo, hi)]
    return spans


SEPARATORS = str.maketrans("", "", " ().-/+")


def digits_of(s: str) -> str:
    """The digits of a candidate, as ASCII digits (other scripts' digits too)."""
    d = s.translate(SEPARATORS)
    return d if d.isascii() and d.isdigit() else "".join(str(int(c)) for c in s if c.isdigit())


def is_card(digits: str) -> bool:
    """14-19 digits that pass Luhn (stdnum) and start as a card network numbers its cards: Visa 4,
    Mastercard 51-55 and 2221-2720, Amex 34/37 (15 digits), Diners 300-305/36/38/39 (14),
    Discover, UnionPay and Maestro 6 and 50/56-58, JCB 3528-3589. (13-digit Visa numbers, no
    longer issued, are left: they look like order ids.)"""
    n = len(digits)
    if not 14 <= n <= 19 or not luhn.is_valid(digits):
        return False
    if n == 15:
        return digits[:2] in ("34", "37")
    if n == 14:
        return digits[:2] in ("36", "38", "39") or "300" <= digits[:3] <= "305"
    return (
        digits[0] in "46"
        or "51" <= digits[:2] <= "58"
        or "50" == digits[:2]
        or "2221" <= digits[:4] <= "2720"
        or "3528" <= digits[:4] <= "3589"
    )


def _cards(text: str, lo: int, hi: int) -> list:
    return [
        (m.start(), m.end(), "card") for m in CARD.finditer(text, lo, hi) if is_card(digits_of(m.group()))
    ]


def _ibans(text: str, lo: int, hi: int) -> list:
    spans = []
    for m in IBAN.finditer(text, lo, hi):
        start = m.start() - 2
        cand = text[start : m.end()]
        for _ in range(8):  # a word after the IBAN may have joined it: drop trailing groups
            if iban.is_valid(cand):
                spans.append((start, start + len(cand), "iban"))
                break
            cut = max(cand.rfind(" "), cand.rfind("-"))
            if cut < 0:
                break
            cand = cand[:cut]
    return spans


def _phones(text: str, lo: int, hi: int) -> list:
    spans = []
    for m in PHONE.finditer(text, lo, hi):
        start, cand = m.start(), m.group()
        for attempt in range(6):  # a number next to other figures: drop groups at the end, then the start
            if not cand.isdigit() and is_phone(cand):
                spans.append((start, start + len(cand), "phone"))
                break
            cut = cand.rfind(" ") if attempt < 3 else cand.find(" ")
            if cut < 0:
                break
            if attempt < 3:
                cand = cand[:cut].rstrip()
            else:
                start, cand = start + cut + 1, cand[cut + 1 :]
    return spans


def _bare_phone(text: str, m: re.Match) -> bool:
    """A bare run of digits (an order id, a timestamp?) is a number only right after a phone word."""
    before = text[m.start() - 1 : m.start()]
    if not 7 <= len(m.group()) <= 15 or (before and (before.isalnum() or before in "+.,/-_")):
        return False
    return bool(PHONE_WORDS.search(text, max(0, m.start() - 24), m.start())) and is_phone(m.group())


def is_phone(cand: str) -> bool:
    """A candidate that phonenumbers validates; dates and IPs are never numbers."""
    digits = digits_of(cand)
    if not 7 <= len(digits) <= 15 or DATE_SHAPE.match(cand) or IP_SHAPE.fullmatch(cand):
        return False
    international = cand.startswith(("+", "00"))
    return _valid_number(("+" + digits[2:]) if cand.startswith("00") else cand, international)


@lru_cache(maxsize=65_536)
def _valid_number(cand: str, international: bool) -> bool:
    for region in (None,) if international else GUESS_REGIONS:
        try:
            if phonenumbers.is_valid_number(phonenumbers.parse(cand, region)):
                return True
        except phonenumbers.NumberParseException:
            continue
    return False
