"""Where the secrets and personal data of one text are: (start, end, kind) spans.

The scrubber (flywheel/scrub.py) merges these spans and rewrites the text once. Each detector
leans on a library of the field and does not re-write it:
- secrets: detect-secrets' own plugins (their compiled patterns, the JWT plugin's validity check,
  the keyword plugin's patterns and keyword list, the entropy plugins' Shannon entropy and limits);
- phone numbers: `phonenumbers` validates every candidate (any region when written with + or 00;
  national formats against GUESS_REGIONS);
- card numbers and IBANs: `python-stdnum` (luhn, iban) validates every candidate.

Linear time by construction, not by hope: a pattern runs over the whole text only if all its
repeats are bounded (`bounded()` checks the parsed pattern; a test checks every pattern so run),
so one attempt costs a constant. A pattern with an unbounded repeat (the library's JWT, URL
basic-auth, Slack, keyword patterns) runs only on a window of at most WINDOW characters after an
anchor, and the JWT scan skips a whole segment once it fails there.

Not done: names, street addresses and other free-form personal data (that needs an NER model such
as Presidio's, which downloads one: not installed); IP addresses (detect-secrets' IP plugin also
takes version numbers); detect-secrets plugins whose pattern is unbounded and has no literal
anchor (Artifactory, Cloudant, IBM, Softlayer, npm: `NOT_RUN`) run nowhere; the keyword detector
covers their `key = value` forms.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import re._constants as sre_c
import re._parser as sre_parse
import unicodedata
from functools import lru_cache

import phonenumbers
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins import keyword as ds_keyword
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from stdnum import iban, luhn

WINDOW = 512  # the most characters a pattern with an unbounded repeat ever sees after its anchor
JWT_WINDOW = 16_384  # JWTs with many claims run to several KB
# national formats (no + or 00) are tried in these regions, most-used first; 245 regions would
# accept nearly any digit string (a date is a valid number in DE, SE, TH and IL)
GUESS_REGIONS = ("US", "GB", "DE", "FR", "IN", "BR", "JP", "ES", "IT", "MX", "CA", "AU", "NL", "CN", "RU",
                 "KR", "PL", "TR", "SE", "CH", "AT", "BE", "PT", "IE", "ZA", "AR", "CO", "NG", "PH", "ID")  # fmt: skip
Span = tuple[int, int, str]


def bounded(pattern: re.Pattern | str) -> bool:
    """True when no repeat of the pattern is unbounded (so one match attempt costs a constant)."""
    flags = pattern.flags if isinstance(pattern, re.Pattern) else 0
    text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    return _bounded(sre_parse.parse(text, flags))


def _bounded(items) -> bool:
    for op, arg in items:
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
            if arg[1] == sre_c.MAXREPEAT or not _bounded(arg[2]):
                return False
        elif op is sre_c.SUBPATTERN and not _bounded(arg[-1]):
            return False
        elif op is sre_c.BRANCH and not all(_bounded(b) for b in arg[1]):
            return False
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT) and not _bounded(arg[1]):
            return False
        elif op is sre_c.ATOMIC_GROUP and not _bounded(arg):
            return False
        elif op is sre_c.GROUPREF_EXISTS and not all(_bounded(b) for b in arg[1:] if b):
            return False
    return True


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


# --- detect-secrets' regex plugins -------------------------------------------------------------
SKIPPED = {"IPPublicDetector", "PrivateKeyDetector", "JwtTokenDetector", "BasicAuthDetector"}  # own handling
ANCHORED = {  # plugin -> the literal its unbounded patterns start at
    "SlackDetector": re.compile(r"(?i)xox[abposr]-|https://hooks\.slack\.com"),
    "OpenAIDetector": re.compile(r"sk-"),
    "PypiTokenDetector": re.compile(r"pypi-"),
}
FULL: list[tuple[re.Pattern, str]] = []  # bounded: run over the whole text
WINDOWED: list[tuple[re.Pattern, re.Pattern, str]] = []  # (anchor, pattern, kind)
NOT_RUN: list[str] = []
for _type, _cls in sorted(get_mapping_from_secret_type_to_class().items()):
    if not issubclass(_cls, RegexBasedDetector) or _cls.__name__ in SKIPPED:
        continue
    for _p in _cls.denylist:
        if bounded(_p):
            FULL.append((_p, _slug(_type)))
        elif _cls.__name__ in ANCHORED:
            WINDOWED.append((ANCHORED[_cls.__name__], _p, _slug(_type)))
        else:
            NOT_RUN.append(f"{_cls.__name__}: {_p.pattern[:60]}")

# provider keys detect-secrets 1.5 has no plugin for (fine-grained GitHub tokens, current OpenAI,
# Anthropic, Hugging Face, Google keys); bounded
OWN_KEYS = re.compile(
    r"github_pat_[A-Za-z0-9_]{22,255}|(?<![\w-])(?:sk|pk|rk)-(?:[a-z]{2,8}-)?[A-Za-z0-9_-]{20,255}"
    r"|(?<![\w-])hf_[A-Za-z0-9]{20,255}|AIza[0-9A-Za-z_-]{35}|(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,255}"
)
BEARER = re.compile(r"(?i)\bbearer\s{1,8}([A-Za-z0-9._~+/=-]{16,4096})")
BASIC = re.compile(r"(?i)\bbasic\s{1,8}([A-Za-z0-9+/]{4,4096}={0,2})")
TOKEN_TAIL = re.compile(r"[A-Za-z0-9_+/=-]{0,4096}")  # a match's own token runs on: redact all of it
PRIVATE_KEY = re.compile("|".join(p.pattern for p in PrivateKeyDetector.denylist))
KEY_END = re.compile(r"-----END [A-Z0-9 ]{1,40}-----|---- END SSH2 ENCRYPTED PRIVATE KEY ----")

# --- keyword assignments: the keyword plugin's own patterns, its keyword list, and a few forms it
# lacks (token names, natural language "my password is ...", other languages)
KEYWORD_PATTERNS = [(p, g) for p, g in {**ds_keyword.CONFIG_DENYLIST_REGEX_TO_GROUP,
                                        **ds_keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
                                        **ds_keyword.GOLANG_DENYLIST_REGEX_TO_GROUP}.items()
                    if p is not ds_keyword.PRECEDED_BY_EQUAL_COMPARISON_SIGNS_QUOTES_REQUIRED_REGEX]  # fmt: skip
DS_WORDS = "|".join(ds_keyword.DENYLIST)
EXTRA_WORDS = (r"(?:access|auth|refresh|api|id|session|bearer|csrf|private)[_-]?token|passphrase|passcode|credentials?"
               r"|passwort|kennwort|mot de passe|senha|parola|wachtwoord|пароль|密码|パスワード")  # fmt: skip
PASSWORD_WORDS = r"password|passwd|pwd|passphrase|passcode|\bpin\b|passwort|kennwort|mot de passe|contrase[nñ]a|senha|пароль"
KEYWORD_ANCHOR = re.compile(f"(?i){DS_WORDS}|{EXTRA_WORDS}|\\bpin\\b")
PLAIN_SECRET = re.compile(  # "token: x", "passphrase = 'a b c'", "my password is x", "le mot de passe est x"
    rf"(?i)(?:(?:{EXTRA_WORDS}|{DS_WORDS}|\bpin\b)\w{{0,40}}[\"'\]]{{0,2}}\s{{0,4}}(?:[:=]|:=|=>)"
    rf"|(?:{PASSWORD_WORDS})\w{{0,20}}\s{{1,4}}(?:is|was|ist|est|es|é|era|war)\s{{0,4}}:?)\s{{0,4}}"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,256})(?P=q)|(?P<bare>\S[^\n]{0,255}))"
)
SECRET_KEY_NAME = re.compile(rf"(?i){ds_keyword.DENYLIST_REGEX}|{EXTRA_WORDS}|^pin$")
CONTEXT = re.compile(r"(?i)key|secret|token|passw|credential|auth")
ENTROPY_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{16,512}(?![A-Za-z0-9+/=_-])")
B64, HEX = Base64HighEntropyString(), HexHighEntropyString()
HEXDIGITS = frozenset("0123456789abcdefABCDEF")

# --- personal data -------------------------------------------------------------------------------
EMAIL = re.compile(r"[\w.%+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){0,8}\.[^\W\d_]{2,24}(?![\w-])")
CARD = re.compile(r"(?<![\d.,])\d(?:[ -]?\d){12,18}(?![\d])")
IBAN_CANDIDATE = re.compile(r"(?i)(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){10,30}(?![A-Za-z0-9])")
PHONE = re.compile(r"(?<![\w+.,/-])(?:\+|\b00)?\(?\d[\d ().\-/]{5,22}\d(?![\w])")
DATE_SHAPE = re.compile(r"(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4})(?!\d)")
IP_SHAPE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
PHONE_WORDS = re.compile(r"(?i)(?:tel|phone|call|mobile|cell|fax|whatsapp|sms|handy|telefon|telefono|"
                         r"téléphone|portable|número|numero|nummer|номер|電話|电话)\W{0,12}$")  # fmt: skip


def _digits(s: str) -> str:
    return "".join(str(int(c)) for c in s if c.isdigit())  # any script's digits, as ASCII


def find_spans(text: str) -> list[Span]:
    """Every span of a secret or personal datum in `text` (spans may overlap; the scrubber merges)."""
    spans: list[Span] = []
    n = len(text)
    for pattern, kind in FULL:
        for m in pattern.finditer(text):  # a group that ends the match is the secret (AWS's context one)
            start, end = m.span(m.lastindex) if m.lastindex and m.end(m.lastindex) >= m.end() - 1 else m.span()
            spans.append((start, _token_end(text, end), kind))
    for anchor, pattern, kind in WINDOWED:
        for a in anchor.finditer(text):
            m = pattern.match(text, a.start(), min(n, a.start() + WINDOW))
            if m:
                spans.append((m.start(), _token_end(text, m.end()), kind))
    for m in OWN_KEYS.finditer(text):
        spans.append((m.start(), _token_end(text, m.end()), "api_key"))
    spans += _auth_headers(text) + _url_credentials(text) + _jwts(text) + _private_keys(text)
    spans += _keywords(text) + _entropy_in_context(text)
    spans += _emails(text) + _cards(text) + _ibans(text) + _phones(text)
    return spans


def _token_end(text: str, end: int) -> int:
    return TOKEN_TAIL.match(text, end).end()


def _auth_headers(text: str) -> list[Span]:
    spans = [(m.start(1), m.end(1), "bearer") for m in BEARER.finditer(text)]
    for m in BASIC.finditer(text):  # "Basic <base64 of user:password>": decode it to be sure
        try:
            decoded = base64.b64decode(m.group(1), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if ":" in decoded:
            spans.append((m.start(1), m.end(1), "basic_auth"))
    return spans


def _url_credentials(text: str) -> list[Span]:
    spans, n, pattern = [], len(text), BasicAuthDetector.denylist[0]
    for p in _find_all(text, "://"):
        m = pattern.match(text, p, min(n, p + WINDOW))
        if m:  # user and password both: a user name is personal data too
            spans.append((p + 3, m.end() - 1, "basic_auth"))
    return spans


def _find_all(text: str, literal: str):
    i = text.find(literal)
    while i >= 0:
        yield i
        i = text.find(literal, i + 1)


JWT_SEGMENT = re.compile(r"[A-Za-z0-9\-_=9:;<>?@\[\\\]^]*+")  # the plugin's class: [A-Za-z0-9-_=] (9-_ is a range)


def _jwts(text: str) -> list[Span]:
    """The JWT plugin's pattern from each "eyJ", windowed; when it fails at one "eyJ" it fails at
    every later one before the same '.', so the scan jumps past them (linear on "eyJeyJeyJ...")."""
    spans, n, pattern = [], len(text), JwtTokenDetector.denylist[0]
    pos, tries, segment_end = 0, 0, -1
    while (p := text.find("eyJ", pos)) >= 0:
        if p >= segment_end:
            segment_end, tries = JWT_SEGMENT.match(text, p).end(), 0
        m = pattern.match(text, p, min(n, p + JWT_WINDOW))
        if m is None or tries >= 3:
            pos = max(segment_end, p + 3)
            continue
        if JwtTokenDetector.is_formally_valid(m.group()):
            end = _token_end(text, m.end())
            spans.append((p, end, "json_web_token"))
            pos = end
        else:  # a later "eyJ" in the same segment may start the real header
            tries, pos = tries + 1, p + 3
    return spans


def _private_keys(text: str) -> list[Span]:
    """From the header line to its END line; no END line: to the end of the text."""
    spans, pos = [], 0
    while m := PRIVATE_KEY.search(text, pos):
        start = text.rfind("-----", max(0, m.start() - 12), m.start())
        start = start if start >= 0 else m.start()
        end_m = KEY_END.search(text, m.end())
        end = end_m.end() if end_m else len(text)
        spans.append((start, end, "private_key"))
        pos = end
    return spans


def _keywords(text: str) -> list[Span]:
    spans, n = [], len(text)
    for a in KEYWORD_ANCHOR.finditer(text):
        line_end = text.find("\n", a.start(), a.start() + WINDOW)
        end = line_end if line_end >= 0 else min(n, a.start() + WINDOW)
        found = False
        for pattern, group in KEYWORD_PATTERNS:
            m = pattern.match(text, a.start(), end)
            if m and m.group(group):
                quoted = text[m.start(group) - 1 : m.start(group)] in ("'", '"', "`")
                spans.append((m.start(group), m.end(group) if quoted else _bare_end(text, m.start(group), m.end(group)), "secret"))
                found = True
                break
        if not found and (m := PLAIN_SECRET.match(text, a.start(), end)):
            if m.group("quoted"):
                spans.append((m.start("quoted"), m.end("quoted"), "secret"))
            else:
                spans.append((m.start("bare"), _bare_end(text, m.start("bare"), m.end("bare")), "secret"))
    return spans


# an unquoted value runs to the end of its line ("password: correct horse battery staple") but
# stops where the prose or the next field plainly goes on: ", ", ". ", two spaces, " name: "
BARE_STOP = re.compile(r"[,;.]\s|\s{2}|\s[\w-]{1,40}\s?[:=]")


def _bare_end(text: str, start: int, end: int) -> int:
    stop = BARE_STOP.search(text, start, end)
    return stop.start() if stop else end


def high_entropy(token: str) -> bool:
    """The entropy plugins' own measure and limits: hex strings against the hex limit."""
    if set(token) <= HEXDIGITS:
        return HEX.calculate_shannon_entropy(token) > HEX.entropy_limit
    return B64.calculate_shannon_entropy(token) > B64.entropy_limit


def _entropy_in_context(text: str) -> list[Span]:
    """A random-looking token within 80 characters after a key-like word ("aws secret ...")."""
    spans, n, last = [], len(text), 0
    for a in CONTEXT.finditer(text):
        lo = max(a.end(), last)
        hi = min(n, a.end() + 80)
        if lo >= hi:
            continue
        for m in ENTROPY_TOKEN.finditer(text, lo, hi):
            if high_entropy(m.group()):
                spans.append((m.start(), m.end(), "high_entropy"))
        last = hi
    return spans


def _emails(text: str) -> list[Span]:
    """Only around an '@' (merged windows), so a text of letters costs nothing."""
    spans, n, windows = [], len(text), []
    for at in _find_all(text, "@"):
        lo, hi = max(0, at - 64), min(n, at + 700)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = hi
        else:
            windows.append([lo, hi])
    for lo, hi in windows:
        spans += [(m.start(), m.end(), "email") for m in EMAIL.finditer(text, lo, hi)]
    return spans


def is_card(digits: str) -> bool:
    """13-19 digits, a card network's first digit (2-6) and the Luhn check (stdnum)."""
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn.is_valid(digits)


def _cards(text: str) -> list[Span]:
    return [(m.start(), m.end(), "card") for m in CARD.finditer(text) if is_card(_digits(m.group()))]


def _ibans(text: str) -> list[Span]:
    spans = []
    for m in IBAN_CANDIDATE.finditer(text):
        cand = m.group()
        for _ in range(8):  # a word after the IBAN may have joined it: drop trailing groups
            if iban.is_valid(cand):
                spans.append((m.start(), m.start() + len(cand), "iban"))
                break
            cut = max(cand.rfind(" "), cand.rfind("-"))
            if cut < 0:
                break
            cand = cand[:cut]
    return spans


def _phones(text: str) -> list[Span]:
    spans = []
    for m in PHONE.finditer(text):
        start, cand = m.start(), m.group()
        for attempt in range(6):  # a number next to other figures: drop groups at the end, then the start
            if is_phone(cand, text[max(0, start - 24) : start]):
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


def is_phone(cand: str, before: str = "") -> bool:
    """A candidate that phonenumbers validates; dates and IPs are never numbers; a bare run of
    digits (an order id, a timestamp) only right after a word such as "phone" or "call"."""
    digits = _digits(cand)
    if not 7 <= len(digits) <= 15 or DATE_SHAPE.match(cand) or IP_SHAPE.fullmatch(cand):
        return False
    international = cand.startswith(("+", "00"))
    if not international and cand.isdigit() and not PHONE_WORDS.search(before):
        return False
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


def secret_key_name(key: str) -> bool:
    """A JSON key whose value is a secret by its name alone ({"password": "..."})."""
    return bool(SECRET_KEY_NAME.search(key))


def decoded_view(text: str) -> str:
    """What a text says once decoded: NFKC (full-width digits, ligatures), invisible format
    characters dropped, JSON/C escapes (\\u0040, \\"), percent-escapes (%40), HTML entities."""
    view = text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)
    view = FORMAT_CHARS.sub("", view)
    if "\\" in view:
        view = ESCAPE.sub(_unescape, view)
    if "%" in view:
        view = PERCENT.sub(lambda m: chr(int(m.group(1), 16)), view)
    if "&" in view:
        view = html.unescape(view)
    return view


FORMAT_CHARS = re.compile(r"[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|([\"'\\/bfnrt]))")
PERCENT = re.compile(r"%([0-9a-fA-F]{2})")
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(m: re.Match) -> str:
    code = m.group(1) or m.group(2)
    return chr(int(code, 16)) if code else _SIMPLE.get(m.group(3), m.group(3))

