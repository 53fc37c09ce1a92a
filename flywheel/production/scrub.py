"""Scrubbing secrets and personal data out of production traces before anything is written.

Every string of a record goes through `Scrubber.scrub_value`, which replaces each secret or
personal datum with `[REDACTED:<kind>]` and counts them per kind (the ingest report prints the
counts). The ingest scrubs a record before it hashes, stores or quarantines it, so neither the
lake, the quarantine nor a trace id ever holds the original text.

What is found (flywheel/production/scrub_detectors.py says how): provider keys and tokens through
detect-secrets' own plugins (AWS access keys and secret keys, GitHub classic and fine-grained
tokens, Stripe, Slack, GitLab, SendGrid, Twilio, Telegram, Discord, Mailchimp, Square, Azure
storage, PyPI, JWTs validated by decoding, private keys PEM/OpenSSH/PGP/PuTTY), OpenAI/Anthropic/
Hugging Face/Google keys, `Authorization: Bearer`/`Basic` values, `user:password@` in URLs,
password-like values after a secret-sounding name (quoted, multi-word, "my password is ...", a few
languages) and high-entropy tokens next to one, emails, phone numbers of any country validated by
`phonenumbers`, card numbers and IBANs validated by `python-stdnum`. `ingest.scrub_patterns` adds
a user's own patterns (`{name: regex}`); `ingest.scrub_defaults: false` keeps only those.

What a value decodes to is scrubbed too:
- a string that is JSON (tool-call `arguments`, a JSON reply) is decoded, scrubbed value by value
  (a value under a secret-sounding key is redacted whole; a card number given as a JSON number
  too) and, when something was redacted, re-encoded; otherwise it is left byte for byte;
- escapes (\\u0040, \\", %40, &#64;) and invisible characters (zero-width spaces): the text is
  read decoded; when the decoded form holds something, the stored text is the decoded form,
  scrubbed (mapping a redaction back through an escape is not attempted);
- look-alike characters (Cyrillic "р", full-width "＠", Arabic-Indic digits, Unicode dashes):
  detectors read the text's skeleton (flywheel/production/scrub_skeleton.py), one character for one, so the
  redactions apply to the text as written;
- content parts: a message's text parts are scrubbed on their join (what `_text` stores), so a
  secret split across parts is found; when the join held something, the first text part holds
  the scrubbed join and the other text parts become empty (their join is unchanged otherwise).

Not done: names, street addresses and other free-form personal data need an NER model (Presidio's
NLP engine downloads one, so presidio is not installed); IP addresses are kept (detect-secrets'
IP plugin also takes version numbers); secrets split across messages, or spelled out in words,
are not found. The user's own patterns run as given: their time is theirs.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter

from flywheel.production.scrub_detectors import find_secrets, secret_key_name
from flywheel.production.scrub_personal import find_personal, is_card
from flywheel.production.scrub_skeleton import skeleton

DEFAULTS_VERSION = "detectors-v2"  # in the ingest's batch id: a new scrubber re-ingests a file
TEXT_PART_TYPES = ("text", "input_text", "output_text")
CACHED_CHARS, CACHE_SIZE = 2048, 20_000  # strings up to this long are remembered, this many at most
GENERIC = {"secret": 1, "high_entropy": 2}  # where spans tie, the specific kind names the redaction


def find_spans(text: str) -> list[tuple[int, int, str]]:
    """The default detectors' spans (they may overlap), found on the text's skeleton: the same
    length, so the spans apply to the text itself."""
    probe = skeleton(text)
    return find_secrets(probe, probe.lower()) + find_personal(probe)


FORMAT_CHARS = re.compile(r"[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|([\"'\\/bfnrt]))")
PERCENT = re.compile(r"%([0-9a-fA-F]{2})")
SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def decoded_view(text: str) -> str:
    """What a text says once decoded: invisible format characters dropped, JSON/C escapes
    (\\u0040, \\"), percent-escapes (%40), HTML entities. (Look-alike characters are read through
    the skeleton instead, which keeps the text's length.)"""
    view = text
    if not text.isascii():
        view = FORMAT_CHARS.sub("", text)
    if "\\" in view:
        view = ESCAPE.sub(_unescape, view)
    if "%" in view:
        view = PERCENT.sub(lambda m: chr(int(m.group(1), 16)), view)
    if "&" in view:
        view = html.unescape(view)
    return view


def _unescape(m: re.Match) -> str:
    code = m.group(1) or m.group(2)
    return chr(int(code, 16)) if code else SIMPLE_ESCAPES.get(m.group(3), m.group(3))


class Tally(dict):
    """Counts per kind for one string, merged into the caller's Counter: a plain dict that reads
    0 for a missing kind (a Counter costs ~20x more to create, and ~3 are made per string)."""

    def __missing__(self, kind: str) -> int:
        return 0

    def update(self, other) -> None:  # adds, as Counter.update does (a nested JSON string's counts)
        for kind, n in other.items():
            self[kind] += n


class ScrubError(ValueError):
    """A pattern of the config that does not compile."""


class Scrubber:
    """The default detectors (when `defaults`) plus the user's patterns, merged into one pass
    that rewrites each string once."""

    def __init__(self, extra: dict[str, str] | None = None, defaults: bool = True):
        self.defaults = defaults
        self._cache: dict[str, tuple[str, tuple]] = {}  # `scrub`'s outcomes
        self._strings: dict[str, tuple[str, tuple]] = {}  # `scrub_value`'s, for string values
        self._keys: dict[str, tuple[str, tuple, bool]] = {}  # a dict key's scrubbed form, counts, secret name
        self.extra: dict[str, re.Pattern] = {}
        for name, pattern in (extra or {}).items():
            try:
                self.extra[name] = re.compile(pattern)
            except re.error as exc:
                raise ScrubError(
                    f"ingest.scrub_patterns: {name!r} is not a valid regular expression: {exc}"
                ) from exc
        # what the ingest hashes into a batch id: the user's patterns and the defaults' version
        self.patterns = {**({"defaults": DEFAULTS_VERSION} if defaults else {}),
                         **{name: p.pattern for name, p in self.extra.items()}}  # fmt: skip

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """Non-overlapping (start, end, kind) spans to redact, in order; where two overlap they
        become one, named after the one that starts first (the longer, then the more specific, at a tie)."""
        found = find_spans(text) if self.defaults else []
        for name, pattern in self.extra.items():
            found += [(m.start(), m.end(), name) for m in pattern.finditer(text) if m.end() > m.start()]
        if not found:  # most texts
            return found
        merged: list[list] = []
        for start, end, kind in sorted(found, key=lambda s: (s[0], -s[1], GENERIC.get(s[2], 0))):
            if merged and start < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end, kind])
        return [tuple(m) for m in merged]

    def _scrub_plain(self, text: str, counts: Counter) -> str:
        spans = self.spans(text)
        if not spans:
            return text
        out, pos = [], 0
        for start, end, kind in spans:
            out += [text[pos:start], f"[REDACTED:{kind}]"]
            counts[kind] += 1
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def scrub(self, text: str, counts: Counter) -> str:
        """`text` with every secret replaced; `counts[kind]` grows by the redactions."""
        if len(text) < 4:
            return text
        if len(text) > CACHED_CHARS:
            return self._scrub_text(text, counts)
        # keys, roles, system prompts and tool names repeat in every record: scrub them once
        if (hit := self._cache.get(text)) is None:
            found = Tally()
            hit = self._cache[text] = (self._scrub_text(text, found), tuple(found.items()))
            if len(self._cache) > CACHE_SIZE:
                self._cache.clear()
        for kind, n in hit[1]:
            counts[kind] += n
        return hit[0]

    def _scrub_text(self, text: str, counts: Counter) -> str:
        view = decoded_view(text)
        if view != text:
            found = Tally()
            scrubbed = self._scrub_plain(view, found)
            if found:  # only the decoded text said it: store that, scrubbed
                counts.update(found)
                return scrubbed
        return self._scrub_plain(text, counts)

    def scrub_value(self, value, counts: Counter):
        """Every string inside a JSON-like value, scrubbed (keys too: they can hold an email)."""
        kind = type(value)  # the exact types json.loads makes first: a record has ~30 values
        if kind is str:
            return self._scrub_string(value, counts)
        if kind is dict:
            return self._scrub_dict(value, counts)
        if isinstance(value, str):
            return self._scrub_string(value, counts)
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return value
        if isinstance(value, int):  # {"card": 4111111111111111}
            if self.defaults and is_card(str(abs(value))):
                counts["card"] += 1
                return "[REDACTED:card]"
            return value
        if isinstance(value, dict):
            return self._scrub_dict(value, counts)
        if isinstance(value, list):
            if _text_parts(value):
                return self._scrub_parts(value, counts)
            scrub_dict, scrub_value = self._scrub_dict, self.scrub_value
            return [scrub_dict(v, counts) if type(v) is dict else scrub_value(v, counts) for v in value]
        return value

    def _scrub_dict(self, value: dict, counts: Counter) -> dict:
        out = {}
        keys, strings = self._keys, self._strings
        for k, v in value.items():
            # a key's scrubbed form, its counts and whether it names a secret: keys repeat in
            # every record, so each is worked out once (the cache is keyed by the exact str only)
            entry = keys.get(k) if type(k) is str else None
            if entry is None:
                entry = self._key_entry(k)
            key, kinds, secret_name = entry
            for kind, n in kinds:
                counts[kind] += n
            vtype = type(v)
            if vtype is str:  # most values: what _scrub_string does, its cache looked up here
                if secret_name and v != "":
                    counts["secret"] += 1
                    out[key] = "[REDACTED:secret]"
                elif len(v) < 4:
                    out[key] = v
                elif (hit := strings.get(v)) is not None:
                    out[key] = hit[0]
                    for kind, n in hit[1]:
                        counts[kind] += n
                else:
                    out[key] = self._scrub_string(v, counts)
            elif vtype is dict:
                out[key] = self._scrub_dict(v, counts)
            elif secret_name and isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "":
                counts["secret"] += 1
                out[key] = "[REDACTED:secret]"
            elif vtype is int and -(10**13) < v < 10**13:  # under 14 digits: no card number
                out[key] = v
            else:
                out[key] = self.scrub_value(v, counts)
        return out

    def _key_entry(self, k) -> tuple[str, tuple, bool]:
        found = Tally()
        name = str(k)
        entry = (self.scrub(name, found), tuple(found.items()), self.defaults and secret_key_name(name))
        if type(k) is str:
            if len(self._keys) >= CACHE_SIZE:
                self._keys.clear()
            self._keys[k] = entry
        return entry

    def _scrub_string(self, text: str, counts: Counter) -> str:
        """A string value: a JSON one read decoded, any other scrubbed as text; the outcome of
        strings up to CACHED_CHARS long is remembered (ids, names and short notes repeat)."""
        if len(text) < 4:  # nothing fits in 3 characters, JSON or not (scrub keeps them too)
            return text
        if len(text) > CACHED_CHARS:
            return self._scrub_string_once(text, counts)
        if (hit := self._strings.get(text)) is None:
            found = Tally()
            hit = (self._scrub_string_once(text, found), tuple(found.items()))
            if len(self._strings) >= CACHE_SIZE:
                self._strings.clear()
            self._strings[text] = hit
        for kind, n in hit[1]:
            counts[kind] += n
        return hit[0]

    def _scrub_string_once(self, text: str, counts: Counter) -> str:
        stripped = text.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            try:
                decoded = json.loads(stripped)
            except ValueError:
                decoded = None
            if isinstance(decoded, (dict, list)):
                found = Tally()
                scrubbed = self.scrub_value(decoded, found)
                if not found:  # every key and value was read decoded: the raw text holds nothing more
                    return text
                counts.update(found)
                return json.dumps(scrubbed, ensure_ascii=False)
        return self._scrub_text(text, counts)  # what `scrub` does, less its cache: this one is the cache

    def _scrub_parts(self, parts: list, counts: Counter) -> list:
        texts = [i for i, p in enumerate(parts) if isinstance(p, dict) and isinstance(p.get("text"), str)]
        joined = "".join(parts[i]["text"] for i in texts)
        found = Tally()
        scrubbed = self.scrub(joined, found)
        if not found:
            return [self.scrub_value(p, counts) for p in parts]
        counts.update(found)
        out = [self.scrub_value({k: v for k, v in p.items() if k != "text"}, counts) if isinstance(p, dict)
               else self.scrub_value(p, counts) for p in parts]  # fmt: skip
        for n, i in enumerate(texts):
            out[i]["text"] = scrubbed if n == 0 else ""
        return out


def _text_parts(value: list) -> bool:
    """A message's content as parts: dicts with a type, at least one of them a text part."""
    return (
        bool(value)
        and all(isinstance(p, dict) and "type" in p for p in value)
        and any(p.get("type") in TEXT_PART_TYPES and isinstance(p.get("text"), str) for p in value)
    )
