"""Secrets in a text: (start, end, kind) spans, found with detect-secrets' own plugins.

Used: the plugins' compiled patterns (AWS, GitHub, GitLab, Stripe, Slack, SendGrid, Twilio,
Telegram, Discord, Mailchimp, Square, Azure storage, PyPI, OpenAI), the JWT plugin's pattern and
its decode check, the private-key plugin's headers, the URL basic-auth pattern, the keyword
plugin's patterns and keyword list, the entropy plugins' Shannon entropy and limits. Added where
the library has nothing: fine-grained GitHub tokens, current OpenAI/Anthropic/Hugging Face/Google
keys, `Bearer`/`Basic` header values (Basic checked by decoding it), token-ish key names,
natural-language "my password is ...", a few languages, high-entropy tokens near a key-like word.

Linear time by construction: a pattern runs over a whole text only if all its repeats are bounded
(`bounded()` reads the parsed pattern; tests check every such pattern), so an attempt costs a
constant; a pattern with an unbounded repeat runs only on a window of at most WINDOW characters
after an anchor, and the JWT scan jumps a whole segment once it fails there. Speed
(flywheel/production/scrub_patterns.py): each pattern runs only when a literal it needs is in the text, one
that re would try at every character only around that literal, and a text in which no path's
literal or word occurs skips them all (`may_hold_secret`, two searches, each from its words'
rarest characters; the Discord and Telegram patterns through stand-ins that start at '.' or ':').

Not done: detect-secrets plugins whose pattern is unbounded and has no anchor here (`NOT_RUN`:
Artifactory, Cloudant, IBM, Softlayer, npm; the keyword detector covers their `key = value`
form); IP addresses (its IP plugin takes version numbers too); secrets spelled out in words.
"""

from __future__ import annotations

import base64
import binascii
import re
from functools import lru_cache

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins import keyword as ds_keyword
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector

from flywheel.production.scrub_patterns import (  # noqa: F401 (bounded, required_literals: the tests read them here)
    Gated,
    _find_all,
    any_of,
    any_of_rare,
    bounded,
    candidates,
    required_literals,
)
from flywheel.production.scrub_skeleton import skeleton, with_skeletons

WINDOW = 160  # the most characters a pattern with an unbounded repeat sees after its anchor
JWT_WINDOW = 16_384  # JWTs with many claims run to several KB
Span = tuple[int, int, str]


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


# --- detect-secrets' regex plugins: bounded patterns over the whole text, the others windowed
# own handling: IPs (versions look alike), private keys (to the END line), JWT and URL credentials
# (windowed below), legacy OpenAI keys (the bounded sk- pattern below covers them)
SKIPPED = {
    "IPPublicDetector",
    "PrivateKeyDetector",
    "JwtTokenDetector",
    "BasicAuthDetector",
    "OpenAIDetector",
}
ANCHORED = {  # plugin -> where its unbounded patterns start
    "SlackDetector": re.compile(r"(?i)xox[abposr]-|https://hooks\.slack\.com"),
    "PypiTokenDetector": re.compile(r"pypi-"),
}
FULL: list[Gated] = []
WINDOWED: dict[re.Pattern, list[tuple[re.Pattern, str]]] = {}  # anchor -> (pattern, kind)
NOT_RUN: list[str] = []
for _type, _cls in sorted(get_mapping_from_secret_type_to_class().items()):
    if not issubclass(_cls, RegexBasedDetector) or _cls.__name__ in SKIPPED:
        continue
    for _p in _cls.denylist:
        if bounded(_p):
            FULL.append(Gated(_p, _slug(_type)))
        elif _cls.__name__ in ANCHORED:
            WINDOWED.setdefault(ANCHORED[_cls.__name__], []).append((_p, _slug(_type)))
        else:
            NOT_RUN.append(f"{_cls.__name__}: {_p.pattern[:60]}")
ANCHORS = [Gated(anchor, "") for anchor in WINDOWED]
# keys detect-secrets 1.5 has no plugin for: fine-grained GitHub, current OpenAI and Anthropic,
# Hugging Face, Google, Stripe test/publishable
FULL += [Gated(re.compile(p), "api_key") for p in (
    r"github_pat_[A-Za-z0-9_]{22,255}", r"(?:sk-|pk-|rk-)(?<![\w-]...)(?:[a-z]{2,8}-)?[A-Za-z0-9_-]{20,255}",
    r"hf_(?<![\w-]hf_)[A-Za-z0-9]{20,255}", r"AIza[0-9A-Za-z_-]{35}", r"(?:sk_live_|rk_live_|pk_live_|sk_test_|rk_test_|pk_test_)[0-9A-Za-z]{10,255}")]  # fmt: skip
# on the lower-cased text; the word boundary is looked for behind the literal, so the scan is fast
BEARER = re.compile(r"bearer(?<![a-z0-9_]bearer)\s{1,8}([a-z0-9._~+/=-]{16,4096})")
BASIC = re.compile(r"basic(?<![a-z0-9_]basic)\s{1,8}([a-z0-9+/]{4,4096}={0,2})")
BEARER_I, BASIC_I = re.compile(BEARER.pattern, re.IGNORECASE), re.compile(BASIC.pattern, re.IGNORECASE)
TOKEN_TAIL = re.compile(r"[A-Za-z0-9_+/=-]{0,4096}")  # a match's own token runs on: redact all of it
PRIVATE_KEY = re.compile("|".join(p.pattern for p in PrivateKeyDetector.denylist))
KEY_END = re.compile(r"-----END [A-Z0-9 ]{1,40}-----|---- END SSH2 ENCRYPTED PRIVATE KEY ----")
JWT_SEGMENT = re.compile(r"[A-Za-z0-9\-_=9:;<>?@\[\\\]^]{0,16384}")  # the plugin's class ("9-_" is a range)

# --- keyword assignments: the keyword plugin's patterns and words, and forms it lacks
KEYWORD_PATTERNS = [(p, g) for p, g in {**ds_keyword.CONFIG_DENYLIST_REGEX_TO_GROUP,
                                        **ds_keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
                                        **ds_keyword.GOLANG_DENYLIST_REGEX_TO_GROUP}.items()
                    if p is not ds_keyword.PRECEDED_BY_EQUAL_COMPARISON_SIGNS_QUOTES_REQUIRED_REGEX]  # fmt: skip
DS_WORDS = "|".join(ds_keyword.DENYLIST)
EXTRA_WORDS = (r"(?:access|auth|refresh|api|id|session|bearer|csrf|private)[_-]?token|(?:api|secret|access|private|client)-key|"
               + with_skeletons("passphrase|passcode|credentials?|passwort|kennwort|mot de passe|senha|parola|wachtwoord"
                                "|пароль|密码|パスワード"))  # fmt: skip
PASSWORD_WORDS = with_skeletons(
    r"password|passwd|pwd|passphrase|passcode|\bpin\b|passwort|kennwort|mot de passe|contrase[nñ]a|senha|пароль"
)
KEYWORD = re.compile(f"(?i){DS_WORDS}|{EXTRA_WORDS}|\\bpin\\b")
KEYWORD_LOW = re.compile(KEYWORD.pattern[4:])  # on the lower-cased text: much faster than (?i)
PLAIN_SECRET = re.compile(  # "token: x", "passphrase = 'a b c'", "my password is x", "le mot de passe est x"
    rf"(?i)(?:(?:{EXTRA_WORDS}|{DS_WORDS}|\bpin\b)\w{{0,40}}[\"'\]]{{0,2}}\s{{0,4}}(?:[:=]|:=|=>)"
    rf"|(?:{PASSWORD_WORDS})\w{{0,20}}\s{{1,4}}(?:is|was|ist|est|es|é|era|war)\s{{0,4}}:?)\s{{0,4}}"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\n]{1,256})(?P=q)|(?P<bare>\S[^\n]{0,255}))"
)
# every keyword above contains one of these (lower case): found with str.find, then checked
STEMS = ("pass", "mot de passe", "pwd", "secret", "key", "token", "credential", "contrase", "kennwort", "senha", "parola",
         "wachtwoord", "пароль", "密码", "パスワード", "pin")  # fmt: skip
STEMS = tuple(dict.fromkeys(STEMS + tuple(skeleton(s) for s in STEMS)))  # detectors read the skeleton
SECRET_KEY_NAME = re.compile(rf"(?i){ds_keyword.DENYLIST_REGEX}|{EXTRA_WORDS}|^pin$")
CONTEXT_STEMS = ("key", "secret", "token", "passw", "credential", "auth")
ENTROPY_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{16,512}(?![A-Za-z0-9+/=_-])")
IDENT = re.compile(r"[\w-]{0,64}")
BARE_STOP = re.compile(r"[,;.]\s|\s{2}|\s[\w-]{1,40}\s?[:=]")
B64, HEX = Base64HighEntropyString(), HexHighEntropyString()
HEXDIGITS = frozenset("0123456789abcdefABCDEF")
PATTERNS = [g.pattern for g in FULL] + [BEARER, BASIC, BEARER_I, BASIC_I, TOKEN_TAIL, PRIVATE_KEY, KEY_END, JWT_SEGMENT, KEYWORD,
                                        PLAIN_SECRET, ENTROPY_TOKEN, IDENT, BARE_STOP]  # fmt: skip


# what each path of find_secrets looks for before it runs, in the text and in its lower-cased form:
# a text with none of these holds no secret, and costs two searches, not ~80 `in` checks
IN_TEXT = ("://", "eyJ", "PRIVATE KEY", "PuTTY-User-Key")
IN_LOW = ("bearer", "basic") + STEMS + CONTEXT_STEMS
GATE_CHARS = 65_536  # texts up to this long are gated: a longer one holds some trigger word anyway
_gated = FULL + ANCHORS


GATE_WORDS_TEXT, GATE_WORDS_LOW = (
    {x for g in _gated if g.icase == ic for x in g.literals if len(x) > 1} | {*words}
    for ic, words in ((False, IN_TEXT), (True, IN_LOW))
)
# each a search that finds something where one of the words is (any_of_rare: from its rarest character)
GATE_TEXT, GATE_LOW = re.compile(any_of_rare(GATE_WORDS_TEXT)), re.compile(any_of_rare(GATE_WORDS_LOW))
# a pattern whose literal is one common character ('.', ':', 'M') is itself the test: it is bounded
GATE_SEARCHED = [g for g in _gated if min(map(len, g.literals)) == 1]
# the same test, faster, for the two such plugin patterns (re tries those at every capital letter or
# digit): a pattern that matches somewhere exactly when the plugin's does, found from the '.' or ':'
# it needs; used only while the plugin's pattern is the one written here (tests compare the two)
_TOKEN = r"[a-zA-Z\d_-]"
SAME_EXISTENCE = {
    rf"[MNO]{_TOKEN}{{23,25}}\.{_TOKEN}{{6}}\.{_TOKEN}{{27}}": re.compile(  # Discord
        r"\.(?:"
        + "|".join(rf"(?<=[MNO]{_TOKEN}{{{n}}}\.)" for n in (23, 24, 25))
        + rf"){_TOKEN}{{6}}\.{_TOKEN}{{27}}"
    ),
    r"\d{8,10}:[0-9A-Za-z_-]{35}": re.compile(r":(?<=\d{8}:)[0-9A-Za-z_-]{35}"),  # Telegram
}
GATE_SEARCH = [(g, SAME_EXISTENCE.get(g.pattern.pattern, g.pattern)) for g in GATE_SEARCHED]
GATE_OPEN = any("" in g.literals for g in _gated)  # a pattern without a literal: every text may match


def may_hold_secret(text: str, low: str) -> bool:
    """False only when no path of find_secrets can find anything in the text (`low` the same length:
    else the (?i) paths read the text itself, and the gate stays open)."""
    if GATE_OPEN or len(low) != len(text) or GATE_TEXT.search(text) or GATE_LOW.search(low):
        return True
    n = len(text)
    for g, search in GATE_SEARCH:  # a stand-in starts from its literal: no `in` test before it
        if n >= g.min_len and (search is not g.pattern or any(lit in text for lit in g.literals)):
            if search.search(text):
                return True
    return False


def find_secrets(text: str, low: str) -> list[Span]:
    """`low` is `text.lower()` when that keeps every index (else the (?i) paths search `text`)."""
    if len(text) <= GATE_CHARS and not may_hold_secret(text, low):
        return []
    spans: list[Span] = []
    for g in candidates(FULL, text, low):
        for m in g.matches(text, low):  # a group that ends the match is the secret (AWS's context one)
            grp = m.lastindex if m.lastindex and m.end(m.lastindex) >= m.end() - 1 else 0
            spans.append((m.start(grp), _token_end(text, m.end(grp)), g.kind))
    for anchor in candidates(ANCHORS, text, low):
        for a in anchor.pattern.finditer(text):
            for pattern, kind in WINDOWED[anchor.pattern]:
                if m := pattern.match(text, a.start(), a.start() + WINDOW):
                    spans.append((m.start(), _token_end(text, m.end()), kind))
    if "bearer" in low or "basic" in low:
        spans += _auth_headers(text, low)
    if "://" in text:
        spans += _url_credentials(text)
    if "eyJ" in text:
        spans += _jwts(text)
    if "PRIVATE KEY" in text or "PuTTY-User-Key" in text:
        spans += _private_keys(text)
    return spans + _keywords(text, low) + _entropy_in_context(text, low)


def _token_end(text: str, end: int) -> int:
    return TOKEN_TAIL.match(text, end).end()


def _auth_headers(text: str, low: str) -> list[Span]:
    same = len(low) == len(text)  # else lower() moved indexes: the slower (?i) patterns on the text
    bearer, basic, hay = (BEARER, BASIC, low) if same else (BEARER_I, BASIC_I, text)
    spans = [(m.start(1), m.end(1), "bearer") for m in bearer.finditer(hay)]
    for m in basic.finditer(hay):  # "Basic <base64 of user:password>": decode it to be sure
        try:
            decoded = base64.b64decode(text[m.start(1) : m.end(1)], validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if ":" in decoded:
            spans.append((m.start(1), m.end(1), "basic_auth"))
    return spans


def _url_credentials(text: str) -> list[Span]:
    spans, pattern = [], BasicAuthDetector.denylist[0]
    for p in _find_all(text, "://"):
        if m := pattern.match(text, p, p + WINDOW):  # user and password: a user name is personal too
            spans.append((p + 3, m.end() - 1, "basic_auth"))
    return spans


def _jwts(text: str) -> list[Span]:
    """The JWT plugin's pattern from each "eyJ", windowed; when it fails at one "eyJ" it fails at
    every later one before the same '.', so the scan jumps past them (linear on "eyJeyJeyJ...")."""
    spans, pattern = [], JwtTokenDetector.denylist[0]
    pos, tries, segment_end = 0, 0, -1
    while (p := text.find("eyJ", pos)) >= 0:
        if p >= segment_end:
            segment_end, tries = JWT_SEGMENT.match(text, p).end(), 0
        m = pattern.match(text, p, p + JWT_WINDOW)
        if m is None or tries >= 3:
            pos = max(segment_end, p + 3)
        elif JwtTokenDetector.is_formally_valid(m.group()):
            pos = _token_end(text, m.end())
            spans.append((p, pos, "json_web_token"))
        else:  # a later "eyJ" in the same segment may start the real header
            tries, pos = tries + 1, p + 3
    return spans


def _private_keys(text: str) -> list[Span]:
    """From the header line to its END line; no END line: to the end of the text."""
    spans, pos = [], 0
    while m := PRIVATE_KEY.search(text, pos):
        start = text.rfind("-----", max(0, m.start() - 12), m.start())
        end_m = KEY_END.search(text, m.end())
        pos = end_m.end() if end_m else len(text)
        spans.append((start if start >= 0 else m.start(), pos, "private_key"))
    return spans


def _stem_hits(text: str, low: str, stems) -> list[int]:
    if len(low) != len(text):  # lower() moved indexes (rare scripts): the slower (?i) regex
        return [m.start() for m in KEYWORD.finditer(text)]
    return sorted(i for s in stems if s in low for i in _find_all(low, s))


def _joined(low: str, h: int) -> bool:
    """Whether the word at `h` joins a word before or after it (a bare "key" is no keyword)."""
    after = low[h + (3 if low.startswith("key", h) else 5) : h + 6]
    return (h > 0 and (low[h - 1].isalnum() or low[h - 1] in "_-")) or after[:1] in ("_", "-", "p")


def _keyword_at(text: str, low: str, h: int) -> re.Match | None:
    """The keyword that holds the stem found at `h`: it starts there, at the identifier's start or
    after a '_' or '-' in it (db_password, client_secret, API-Key), at most 16 characters back."""
    if len(low) != len(text):
        return KEYWORD.search(text, max(0, h - 16), h + 20)
    back = IDENT.match(low[max(0, h - 16) : h][::-1]).end()
    for start in [h - back] + [i + 1 for i in range(h - back, h) if low[i] in "_-"] + [h]:
        if (m := KEYWORD_LOW.match(low, start, h + 20)) and m.end() > h:
            return m
    return None


def _keywords(text: str, low: str) -> list[Span]:
    """At each keyword: the keyword plugin's patterns, then ours, on the rest of its line (at
    most WINDOW characters). One try per identifier, so "passwordpassword..." costs one."""
    spans, done = [], -1
    for h in _stem_hits(text, low, STEMS):
        if h < done:
            continue
        done = IDENT.match(text, h).end()
        if done - h >= 64:  # not a key's name; the next 64 characters of it are skipped too
            continue
        if low.startswith(("key", "token"), h) and not _joined(low, h):  # "api_key", "auth_token", "key_pass"
            continue
        if (kw := _keyword_at(text, low, h)) is None:
            continue
        line_end = text.find("\n", kw.start(), kw.start() + WINDOW)
        end = line_end if line_end >= 0 else kw.start() + WINDOW
        for pattern, group in KEYWORD_PATTERNS:
            if (m := pattern.match(text, kw.start(), end)) and m.group(group):
                lo, hi = m.span(group)
                quoted = text[lo - 1 : lo] in ("'", '"', "`")
                spans.append((lo, hi if quoted else _bare_end(text, lo, hi), "secret"))
                break
        else:
            if m := PLAIN_SECRET.match(text, kw.start(), end):
                g = "quoted" if m.group("quoted") else "bare"
                spans.append(
                    (
                        m.start(g),
                        m.end(g) if g == "quoted" else _bare_end(text, m.start(g), m.end(g)),
                        "secret",
                    )
                )
    return spans


def _bare_end(text: str, start: int, end: int) -> int:
    """An unquoted value runs to the end of its line ("password: correct horse battery staple") but
    stops where prose or the next field plainly goes on: ", ", ". ", two spaces, " name: "."""
    stop = BARE_STOP.search(text, start, end)
    return stop.start() if stop else end


def high_entropy(token: str) -> bool:
    """The entropy plugins' own measure and limits: hex strings against the hex limit."""
    if set(token) <= HEXDIGITS:
        return HEX.calculate_shannon_entropy(token) > HEX.entropy_limit
    return B64.calculate_shannon_entropy(token) > B64.entropy_limit


def _entropy_in_context(text: str, low: str) -> list[Span]:
    """A random-looking token within 80 characters after a key-like word ("aws secret is ...")."""
    windows: list[list[int]] = []
    for h in _stem_hits(text, low, CONTEXT_STEMS):
        if windows and h <= windows[-1][1]:
            windows[-1][1] = h + 80
        else:
            windows.append([h, h + 80])
    tokens = (m for lo, hi in windows for m in ENTROPY_TOKEN.finditer(text, lo, hi))
    return [(m.start(), m.end(), "high_entropy") for m in tokens if high_entropy(m.group())]


@lru_cache(maxsize=4096)
def secret_key_name(key: str) -> bool:
    """A JSON key whose value is a secret by its name alone ({"password": "..."})."""
    return bool(SECRET_KEY_NAME.search(key))
