"""Scrubbing (flywheel/scrub.py and its detectors): each kind the README promises, with cases
written apart from the detectors; what must stay; what values decode to; and the construction
that keeps it linear. Real libraries throughout (detect-secrets, phonenumbers, stdnum)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from flows.ingest import ingest_file
from flywheel import scrub_detectors, scrub_personal
from flywheel.config import IngestConfig
from flywheel.production_logs import parse_record
from flywheel.scrub import Scrubber
from storage.lake import Lake
from storage.traces import TraceStore

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def scrubbed(text: str) -> tuple[str, Counter]:
    counts = Counter()
    return Scrubber().scrub(text, counts), counts


@pytest.mark.parametrize("number", [
    "(415) 555-0132",          # US, national
    "+1 212 555 0199",         # US, international
    "020 7946 0958",           # UK, national
    "+44 7911 123456",         # UK mobile
    "01 23 45 67 89",          # France, national
    "0033 6 12 34 56 78",      # France, 00 prefix
    "030 12345678",            # Germany, national
    "+49 151 23456789",        # Germany mobile
    "03-1234-5678",            # Japan, national
    "(11) 91234-5678",         # Brazil, national
    "+91 98765 43210",         # India
    "912 345 678",             # Spain, national
    "+61 2 9876 5432",         # Australia
    "+7 495 123-45-67",        # Russia
])  # fmt: skip
def test_phone_numbers_of_many_countries_with_and_without_plus(number):
    out, counts = scrubbed(f"Ring me on {number} after lunch.")
    assert out == "Ring me on [REDACTED:phone] after lunch." and counts == {"phone": 1}


def test_a_bare_digit_run_is_a_phone_number_only_after_a_phone_word():
    assert scrubbed("call 4155550132 today")[0] == "call [REDACTED:phone] today"
    assert scrubbed("電話 0312345678")[0] == "電話 [REDACTED:phone]"
    assert scrubbed("order 4155550132 shipped")[0] == "order 4155550132 shipped"


JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsInJvbGUiOiJhZG1pbiJ9."
       "c2lnbmF0dXJlLW9mLXRoZS10b2tlbi1oZXJlLTEyMzQ1Njc4OTA")  # fmt: skip
SECRET_CASES = [
    ("aws key AKIAJ7Q2LZ4XW3KPB5RT in the log", "AKIAJ7Q2LZ4XW3KPB5RT", "aws_access_key"),
    ("aws_secret_access_key = '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'", "q8Fz3LmN0pR7", None),
    ("AWS_SECRET_ACCESS_KEY=q8Fz3LmN0pR7sT2vW5xY9aB4cD6eF1gH3jK8lM0n", "q8Fz3LmN0pR7", None),
    ("my aws secret is q8Fz3LmN0pR7sT2vW5xY9aB4cD6eF1gH3jK8lM0n ok", "q8Fz3LmN0pR7", "high_entropy"),
    ("use github_pat_11AAQ3X7Y0abcDEF123456_zXy98765WvuTSRqpo43210nmlKJIhgf7654edcBA321zyxWVU0987tsr please",
     "github_pat_11AAQ3X7Y0", "api_key"),
    ("gh token ghp_Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2 ok", "ghp_Z9y8X7w6V5u4T3s2", "github_token"),
    ("stripe sk_live_51Mz8QwErTyUiOpAsDfGhJkLzXcVbNm0123456789abcdefGHIJKLmnop done", "sk_live_51Mz8Qw",
     "stripe_access_key"),
    ("restricted rk_live_4eC39HqLyjWDarjtT1zdp7dc and more", "rk_live_4eC39Hq", "stripe_access_key"),
    (f"session {JWT} expired", "c2lnbmF0dXJl", "json_web_token"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQVYBGVz8AEBDADm1x\n=Zx9Q\n-----END PGP PRIVATE KEY BLOCK-----\nthanks",
     "lQVYBGVz8AEBDADm1x", "private_key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
     "b3BlbnNzaC1rZXktdjEAAAAA", "private_key"),
    ("curl -H 'Authorization: Basic YWxpY2U6czNjcjN0IQ==' https://api", "YWxpY2U6czNjcjN0IQ", "basic_auth"),
    ("Authorization: Bearer 8f2b1c9d0e7a6f5b4c3d2e1f0a9b8c7d", "8f2b1c9d0e7a", "bearer"),
    ("clone https://alice:s3cr3t-Pa55@git.example.org/repo.git now", "s3cr3t-Pa55", "basic_auth"),
    ('config = {"password": "correct horse battery staple"}', "horse battery", "secret"),
    ("password: correct horse battery staple\nnext line", "horse battery", "secret"),
    ("DB_PASSWORD='Tr0ub4dor&3 x'", "Tr0ub4dor", "secret"),
    ("my password is Hunter2!x and that's it", "Hunter2!x", "secret"),
    ("мой пароль: секрет123", "секрет123", "secret"),
    ("le mot de passe est soleil42", "soleil42", "secret"),
    ("refresh_token=1//0gLx8Yz-abcdEFGH", "1//0gLx8Yz", "secret"),
    ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx bot", "AbCdEfGhIjKl", "slack_token"),
    ("hf token hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345 x", "hf_aBcDeFgHiJ", "api_key"),
    ("key sk-proj-Q2w3E4r5T6y7U8i9O0pAsDfGhJkL and", "sk-proj-Q2w3E4", "api_key"),
]  # fmt: skip


@pytest.mark.parametrize("text, secret, kind", SECRET_CASES, ids=[c[2] or "aws_secret" for c in SECRET_CASES])
def test_each_secret_kind(text, secret, kind):
    out, counts = scrubbed(text)
    assert secret not in out, out
    if kind:
        assert counts[kind] >= 1, counts
    assert "[REDACTED:" in out


def test_personal_data_validated_by_libraries():
    out, counts = scrubbed("Pay IBAN GB82 WEST 1234 5698 7654 32 or DE89370400440532013000, card 5555-5555-5555-4444; "
                           "mail jane.o'neil+x@sub.example.co.uk, Amex 3782 822463 10005")  # fmt: skip
    assert counts == {"iban": 2, "card": 2, "email": 1}, (out, counts)
    assert "5555" not in out and "3782" not in out and "WEST" not in out and "jane" not in out
    # a Luhn-valid number that is no card network's and an IBAN with a wrong check digit stay
    keep = "ref 1234567812345670 and GB83WEST12345698765432"
    assert scrubbed(keep)[0] == keep


@pytest.mark.parametrize("text", [
    "Invoice INV-20931 from Acme Ltd: 12 items, total 1,250.00 EUR (VAT 237.50), due 2026-11-30.",
    "Order 1234567890123 shipped on 30/11/2026 at 14:30; tracking 9400111202555842",
    "Upgrade to v3.11.7 or 2.13.0+cpu fixed it; see commit 3f2a9c0d1e8b7a6f5c4d3e2f1a0b9c8d7e6f5a4b.",
    "The server at 10.0.0.12:8080 answered 200 in 0.043 s; epoch 1764633600.",
    "Quarterly revenue: $4,512,300.25, up 12.5% on 2025; 3 of 4 regions grew.",
    "Basic training starts Monday; the key points are in the secret sauce section.",
    "Please reset your password using the link we sent; never share a password.",
    '{"total": 7511, "vendor": "Umbrella", "qty": 3}',
    "def check(password):\n    return len(password) >= 12\n",
])  # fmt: skip
def test_what_must_stay(text):
    assert scrubbed(text) == (text, Counter())


def test_escaped_and_encoded_forms():
    for text in ["mail jane\\u0040example.com please", "mail jane%40example.com please",
                 "mail jane&#64;example.com please", "mail jane\u200b@example.com please",
                 "card ４１１１ １１１１ １１１１ １１１１"]:  # fmt: skip
        out, counts = scrubbed(text)
        assert (
            "jane" not in out and "1111" not in out and "１１１１" not in out and sum(counts.values()) == 1
        ), out


@pytest.mark.parametrize("text, kept, kind", [
    ("раssword: hunter2", "раssword: ", "secret"),                  # Cyrillic р and а
    ("mail jane＠example.com today", "mail ", "email"),             # full-width @
    ("call (415) 555–0132 now", "call ", "phone"),                  # en dash
    ("card ٤١١١ ١١١١ ١١١١ ١١١١", "card ", "card"),                  # Arabic-Indic digits
    ("мой пароль: секрет123", "мой пароль: ", "secret"),
])  # fmt: skip
def test_look_alike_characters_are_read_as_what_they_imitate(text, kept, kind):
    """The detectors read a same-length skeleton, so the stored text keeps its own letters."""
    out, counts = scrubbed(text)
    assert out.startswith(kept + "[REDACTED:") and counts == {kind: 1}, out
    prose = "Привет, как дела? Всё хорошо, спасибо. Τα λέμε αύριο στις 10:30."
    assert scrubbed(prose) == (prose, Counter())


def test_tool_call_arguments_are_decoded_scrubbed_and_reencoded():
    args = json.dumps(
        {
            "to": "jane.doe@example.com",
            "note": "call +44 20 7946 0958",
            "login": {"user": "bob", "password": "two words"},
            "card": 4111111111111111,
            "qty": 3,
        }
    )
    args = args.replace("@", "\\u0040")  # the attacker's escape
    record = {
        "messages": [
            {"role": "user", "content": "send it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "send", "arguments": args}}
                ],
            },
        ]
    }
    counts = Counter()
    trace = parse_record(record, Scrubber(), counts)
    stored = json.loads(trace["response"]["tool_calls"][0]["arguments"])
    assert stored == {"to": "[REDACTED:email]", "note": "call [REDACTED:phone]", "card": "[REDACTED:card]", "qty": 3,
                      "login": {"user": "bob", "password": "[REDACTED:secret]"}}  # fmt: skip
    assert counts == {"email": 1, "phone": 1, "card": 1, "secret": 1}
    # arguments without a secret stay byte for byte (so a trace id does not move)
    plain = '{"city":  "Oslo", "days": 3}'
    assert Scrubber().scrub_value(plain, Counter()) == plain


def test_a_secret_split_across_content_parts():
    parts = [{"type": "text", "text": "my key is sk-proj-Q2w3E4r5"}, {"type": "text", "text": "T6y7U8i9O0pAsDfGhJkL, thanks"},
             {"type": "text", "text": " and mail jane.doe@exa"}, {"type": "text", "text": "mple.com"}]  # fmt: skip
    counts = Counter()
    trace = parse_record({"messages": [{"role": "user", "content": parts}]}, Scrubber(), counts)
    assert trace["messages"][0]["content"] == "my key is [REDACTED:api_key], thanks and mail [REDACTED:email]"
    assert counts == {"api_key": 1, "email": 1}
    clean = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert Scrubber().scrub_value(clean, Counter()) == clean


def test_record_fields_keep_their_types():
    record = {"timestamp": 1764633600123, "request": {"max_tokens": 4111111111111111 // 10**9, "messages": [
        {"role": "user", "content": "hi"}]}, "api_key": "k-123", "client_secret": 99}  # fmt: skip
    out = Scrubber().scrub_value(record, Counter())
    assert out["timestamp"] == 1764633600123 and out["request"]["max_tokens"] == 4111111
    assert out["api_key"] == "[REDACTED:secret]" and out["client_secret"] == "[REDACTED:secret]"


def test_user_patterns_alone_and_with_the_defaults():
    only = Scrubber({"ticket": r"TCK-\d+"}, defaults=False)
    assert (
        only.scrub("see TCK-991 by jane@example.com", Counter())
        == "see [REDACTED:ticket] by jane@example.com"
    )
    kept = {"password": "x y", "card": 4111111111111111, "note": "TCK-7"}
    assert only.scrub_value(kept, Counter()) == {
        **kept,
        "note": "[REDACTED:ticket]",
    }  # no default rule at all
    both = Scrubber({"ticket": r"TCK-\d+"})
    counts = Counter()
    assert (
        both.scrub("see TCK-991 by jane@example.com", counts) == "see [REDACTED:ticket] by [REDACTED:email]"
    )
    assert counts == {"ticket": 1, "email": 1}
    assert only.patterns != both.patterns != Scrubber().patterns  # the ingest's batch id tells them apart


def test_linear_by_construction():
    """Every pattern run over a whole text has only bounded repeats; the unbounded ones of the
    library run only in windows; `bounded` itself tells the two apart."""
    assert not scrub_detectors.bounded(re.compile(r"(a+)+b")) and not scrub_detectors.bounded(
        re.compile(r"x.*y")
    )
    assert scrub_detectors.bounded(re.compile(r"(?:a{1,4}b){2,8}"))
    whole_text = [*scrub_detectors.PATTERNS, *scrub_personal.PATTERNS]
    assert all(scrub_detectors.bounded(p) for p in whole_text), [
        p.pattern for p in whole_text if not scrub_detectors.bounded(p)
    ]
    assert all(scrub_detectors.bounded(a) for a in scrub_detectors.WINDOWED)  # anchors
    windowed = [p for group in scrub_detectors.WINDOWED.values() for p, _ in group]
    assert windowed and not all(scrub_detectors.bounded(p) for p in windowed)  # these need their window
    assert scrub_detectors.WINDOW <= 512 and scrub_detectors.JWT_WINDOW <= 16_384
    # the plugins that run nowhere are the unbounded ones without an anchor, and say so
    assert {n.split(":")[0] for n in scrub_detectors.NOT_RUN} == {
        "ArtifactoryDetector", "CloudantDetector", "IbmCosHmacDetector", "IbmCloudIamDetector", "NpmDetector",
        "SoftlayerDetector"}  # fmt: skip


def test_windowed_patterns_find_what_a_whole_text_scan_finds():
    """A pattern that re would try at every character runs only in windows around its literal:
    on texts with its matches near the windows' edges, next to each other, amid prose and look-alike
    noise, the windows give the very matches of `finditer` over the whole text."""
    windowed = [g for g in scrub_detectors.FULL if g.windowed]
    assert {g.kind for g in windowed} >= {"api_key", "stripe_access_key", "telegram_bot_token"}
    rng = random.Random(7)
    token = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(300))
    pieces = [
        "sk_live_" + token[:30], "rk_live_" + token[:24], "sk-proj-" + token[:60], "-sk-" + token[:40],
        "12345678:" + token[:35] + "_-" + token[:8], "9" * 11 + ":" + token[:36], token[:32] + "-us12",
        "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs", "AWS key: '" + token[:40] + "'",
        "aws_secret = \"" + token[:40] + "\"", "ok. 14:30 v1.2.3 sk- pk- k_live_ :", " ", "\n", "_", "x" * 200,
    ]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        low = text.lower()
        for g in windowed:
            assert [m.span() for m in g.matches(text, low)] == [m.span() for m in g.pattern.finditer(text)], (
                g.pattern.pattern, text)


def test_the_gate_faster_patterns_match_where_the_plugins_do():
    """The gate's stand-ins for the Discord and Telegram plugin patterns (searched from the '.' or
    ':' they need, not at every capital or digit) are used, and say "somewhere here" exactly when
    the plugin's own pattern does, on near misses around every bound: 7-11 digits before ':',
    34-36 token characters, 22-26 before the first '.', other scripts' digits, other letters."""
    used = {g.pattern.pattern for g, fast in scrub_detectors.GATE_SEARCH if fast is not g.pattern}
    assert used == set(scrub_detectors.SAME_EXISTENCE)
    rng = random.Random(11)

    def run(n: int, chars: str = "aZ09_-") -> str:  # now and then one character that breaks the run
        text = "".join(rng.choice(chars) for _ in range(n))
        return text if rng.random() < 0.8 or not n else text[:-1] + rng.choice(" .:+\u00e9")

    found = Counter()
    for _ in range(4000):
        discord = (rng.choice("MNOPm") + run(rng.choice([22, 23, 24, 25, 26])) + rng.choice("..:")
                   + run(rng.choice([5, 6, 7])) + rng.choice("..,")
                   + run(rng.choice([26, 27, 28])))  # fmt: skip
        digits = run(rng.choice([7, 8, 9, 10, 11]), "0123456789\u0663")
        telegram = digits + rng.choice("::.") + run(rng.choice([34, 35, 36]))
        text = rng.choice([discord, telegram, discord + telegram])
        text = run(rng.randint(0, 4)) + text + run(rng.randint(0, 4))
        for plugin, fast in scrub_detectors.SAME_EXISTENCE.items():
            assert bool(fast.search(text)) == bool(re.search(plugin, text)), (plugin, text)
            found[plugin, bool(fast.search(text))] += 1
    assert min(found.values()) > 50  # both patterns found and missed, many times each
    for plugin, fast in scrub_detectors.SAME_EXISTENCE.items():  # the real shapes: found by both
        for text in ("MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
                     "bot 12345678:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1 ok"):  # fmt: skip
            assert bool(fast.search(text)) == bool(re.search(plugin, text))


def test_the_gate_searched_from_rare_characters_finds_what_the_word_trie_finds():
    """any_of_rare (each word searched from its rarest character, behind a lookbehind) finds
    something in a text exactly when any_of finds a word there: on the gate's own words, on each
    with one character changed or dropped, and on random mixes of their pieces."""
    rng = random.Random(5)
    gates = (scrub_detectors.GATE_WORDS_TEXT, scrub_detectors.GATE_WORDS_LOW, ["ab", "abc", "b", "xy", "q.r"])
    for words in gates:
        trie, rare = re.compile(scrub_detectors.any_of(words)), re.compile(scrub_detectors.any_of_rare(words))
        words = sorted(words)
        texts = list(words) + [w[:i] + c + w[i + 1 :] for w in words for i in range(len(w)) for c in "x_-"]
        texts += [w[:i] + w[i + 1 :] for w in words for i in range(len(w))]
        pieces = [w[i:j] for w in words for i in range(len(w)) for j in range(i + 1, len(w) + 1)]
        texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
        assert sum(bool(trie.search(t)) for t in texts) > len(words)
        for text in texts:
            assert bool(rare.search(text)) == bool(trie.search(text)), (words[:3], text)


def test_the_skeleton_is_the_whole_text_translated():
    """skeleton() translates only non-ASCII runs, and skips a text without a look-alike: the same as
    str.translate over the whole text, on every look-alike and on random mixes of scripts."""
    from flywheel.scrub_skeleton import LOOK_ALIKE, SKELETON, skeleton

    assert all(LOOK_ALIKE.fullmatch(chr(code)) for code in SKELETON)
    rng = random.Random(3)
    look_alikes = list(SKELETON)
    for _ in range(5000):
        text = "".join(chr(rng.choice(look_alikes)) if rng.random() < 0.05 else chr(rng.randint(0x20, 0x3100))
                       for _ in range(rng.randint(0, 40)))  # fmt: skip
        assert skeleton(text) == text.translate(SKELETON)
    assert skeleton("Grüße, 注文番号 と 𝐩𝐚𝐬𝐬 ") == "Grüße, 注文番号 と pass "


def test_the_phone_words_trie_finds_what_their_list_finds():
    """PHONE_WORDS, built as a trie keeping every word ("tel" and "telefon"), finds a phone word at
    a window's end exactly where the plain alternation of the words does, in any case."""
    from flywheel.scrub_patterns import word_trie

    words = scrub_personal.PHONE_WORD_LIST
    plain = re.compile("(?i)(?:" + "|".join(map(re.escape, words)) + r")\W{0,12}$")
    assert scrub_personal.PHONE_WORDS.pattern == "(?i)(?:" + word_trie(words) + r")\W{0,12}$"
    rng = random.Random(7)
    pieces = words + [w.upper() for w in words] + [w[:-1] for w in words] + [" ", ": ", "-", "x", "1", "\n"]
    found = 0
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 5)))
        lo = max(0, len(text) - 24)
        assert bool(scrub_personal.PHONE_WORDS.search(text, lo)) == bool(plain.search(text, lo)), text
        found += bool(plain.search(text, lo))
    assert 2000 < found < 18000


def test_the_short_text_gate_only_skips_texts_without_secrets(monkeypatch):
    """find_secrets skips a short text whose lower-cased form holds none of the literals and
    words its paths look for: on every case of this file and on their pieces and neighbours, the
    gated result is the ungated one; the gate does close on a record's usual keys and ids."""
    texts = [t for t, _, _ in SECRET_CASES] + [
        "pin: 4242", "auth=Zk3jQ9xLm2Np8Rt5Vw7Yb1Cd", "x" * 50 + ".MTk4NjIy", "12345678:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1",
        "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs", "0123456789abcdef0123456789abcdef-us12",
        "pypi-AgEIcHlwaS5vcmcCJGE0", "AccountKey=" + "a" * 88, "Passwort: Sommer2026", "SG." + "a" * 22 + "." + "b" * 43,
        "id eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiJ9.c2lnbmF0dXJl", "Bearer Zk3jQ9xLm2Np8Rt5", "ssh://u:p4ss@h",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow", "PuTTY-User-Key-File-2: ssh-rsa", "xoxb-1234-5678-abcdEFGH",
        "İstanbul ofisi: password = hunter2x", "Grüße, Kennwort: Frühling2026", "パスワード: himitsu-42",
        "ci glpat-abcdefghij0123456789 ok", "gho_" + "a1" * 18, "xoxp-1234-5678-abcdEFGH",
    ]  # fmt: skip
    texts += [t[i : i + n] for t in list(texts) for n in (8, 20, 45, 70) for i in range(0, len(t) - n + 1, 7)]
    # literals spelled out from small sets and groups: "(ghp|gho)_" needs "ghp_" or "gho_", not just "gh"
    assert scrub_detectors.required_literals(re.compile(r"x?(ghp|gh[ou])_\w{3}")) == ("ghp_", "gho_", "ghu_")
    assert re.findall(scrub_detectors.any_of(["ab", "abc", "b", "xy", "xyz", "q.r"]), "ab xyz qqr q.r") == [
        "b", "xy", "q.r"]  # fmt: skip
    gated = [scrub_detectors.find_secrets(t, t.lower()) for t in texts]
    monkeypatch.setattr(scrub_detectors, "GATE_CHARS", 0)
    assert gated == [scrub_detectors.find_secrets(t, t.lower()) for t in texts]
    assert sum(map(bool, gated)) >= len(SECRET_CASES)
    for key in ("timestamp", "workload_id", "assistant", "INV-54254", "Acme Ltd", "2026-11-30", "lookup",
                "Bitte prüfen Sie die Bestellung vom 2026-11-30.", "注文番号 の配送状況を確認しました。",
                "The invoice INV-77 from Acme lists 3 items, total 1,250.00 EUR, due 2026-11-30.",
                "I checked the right invoice through the global portal; English only."):  # fmt: skip
        assert not scrub_detectors.may_hold_secret(key, key.lower())


def test_counts_add_up_through_nested_json_and_long_escaped_values():
    """Each redaction counts once however deep it sits: a JSON string inside a JSON argument, and a
    long value (not cached) whose escape hides an address, beside another address."""
    inner = json.dumps({"to": "bob@example.com"})
    body = "x " * 1100 + "mail carl\\u0040example.com"
    args = json.dumps({"cc": "ann@example.com", "payload": inner, "body": body})
    counts = Counter()
    out = Scrubber().scrub_value({"arguments": args}, counts)
    assert counts == {"email": 3}, counts
    assert "example.com" not in json.dumps(out)


def test_hostile_repetitions_are_scrubbed_without_blowing_up():
    """Correctness on the inputs the bench times (bench/scrub.py measures the time)."""
    s = Scrubber()
    assert s.scrub("eyJ" * 2000 + "." + JWT, Counter()).count("[REDACTED:json_web_token]") == 1
    out = s.scrub("password: " * 500, Counter())
    assert out.startswith("password: [REDACTED:secret]")
    assert s.scrub("a@" * 3000 + " jane@example.com", Counter()).endswith(" [REDACTED:email]")


def test_ingest_of_the_example_invoices(tmp_path):
    store = TraceStore(Lake(str(tmp_path / "lake")))
    path = EXAMPLES / "invoices.jsonl"
    report = ingest_file(store, str(path), IngestConfig())
    lines = path.read_text().splitlines()
    assert (report.records, report.quarantined) == (len(lines), 0) and report.new == len(lines)
    assert report.redactions == {"email": len(lines)}  # one contact address each, nothing else
    traces = store.traces().to_pylist()
    first = json.loads(lines[0])
    user = next(t for t in traces if t["timestamp"].timestamp() == first["timestamp"])["messages"][1][
        "content"
    ]
    assert user == first["request"]["messages"][1]["content"].replace(
        "billing@umbrella.com", "[REDACTED:email]"
    )


def test_number_patterns_run_only_around_the_runs_that_may_hold_their_kind():
    """Each run of digits is sorted once: CARD runs only around runs of 14+ digits, PHONE only around
    runs `_phone_free` does not rule out. Checked against the patterns themselves on fuzzed text
    (cards, IBANs, phones, dates, ids, '+' and '(' next to them, other scripts' digits): no PHONE
    match starting anywhere overlaps a run called phone-free, every CARD match lies within MARGIN
    of a long run, and the spans are those of a whole-text scan. (The one form left out: a digit,
    '(' and three separators before 6 more digits, which holds no run of 7; the scrubber before
    found it only when some other run lay within 2,000 characters.)"""
    rng = random.Random(11)
    pieces = ["4111 1111 1111 1111", "4111-1111-1111-1111", "378282246310005", "30569309025904", "1" * 45,
              "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "+44 20 7946 0958", "(415) 555-0199",
              "+1 (415) 555-0132", "030 1234 5678", "0044 20 7946 0958", "+81 3-1234-5678", "2026-03-05",
              "2026/3/5", "05.03.2026", "192.168.1.1", "12,345.67", "1234567890123", "12345678901234",
              "1.2.3", "+(1) 234 567", "+ 1234567", "((12) 345 6789", "call ", "123456",
              "٤١١١ ١١١١ ١١١١ ١١١١", "𑁧𑁨𑁩𑁪𑁫𑁬𑁭𑁮"]  # fmt: skip
    left_out = re.compile(r"[0-9]\([ ().\-/]{3}[0-9]")
    for _ in range(1500):
        text = "".join(rng.choice(pieces) if rng.random() < 0.5 else rng.choice("0123456789 ()+-./,aZ")
                       for _ in range(rng.randint(1, 30)))  # fmt: skip
        runs = list(scrub_personal.DIGIT_RUN.finditer(text))
        starts = [m for pos in range(len(text)) if (m := scrub_personal.PHONE.match(text, pos))]
        for before, run in zip([None, *runs], runs):
            goes_on = before is not None and run.start() - before.end() <= 3  # a run cut at 41 digits
            free = scrub_personal._phone_free(text, run.start(), run.group(), run.group().isdigit())
            if free and not goes_on:
                assert not [m for m in starts if m.start() < run.end() and m.end() > run.start()], text
        if not text.isascii() and scrub_personal.OTHER_DIGIT.search(text):
            continue  # CARD reads other scripts' digits: it runs in every long window there
        long = [m for m in runs if len(m.group().translate(scrub_personal.SEPARATORS)) >= 14]
        for card in scrub_personal.CARD.finditer(text):
            assert any(m.start() - 40 <= card.start() and card.end() <= m.end() + 40 for m in long), text
        if left_out.search(text):
            continue
        whole = scrub_personal._cards(text, 0, len(text)) + scrub_personal._phones(text, 0, len(text))
        found = [s for s in scrub_personal.find_personal(text) if s[2] in ("card", "phone")]
        bare = [m.span() for m in runs if m.group().isdigit() and scrub_personal._bare_phone(text, m)]
        assert sorted(found) == sorted(whole + [(*b, "phone") for b in bare]), text
