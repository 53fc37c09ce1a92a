"""Scrubbing (flywheel/production/scrub.py and its detectors): each kind the README promises, with cases
written apart from the detectors; what must stay; what values decode to (how it stays linear and fast:
tests/test_scrub_construction.py). Real libraries throughout (detect-secrets, phonenumbers, stdnum)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from flywheel.flows.ingest import ingest_file
from flywheel.config import IngestConfig
from flywheel.production.logs import parse_record
from flywheel.production.scrub import Scrubber
from flywheel.storage.lake import Lake
from flywheel.storage.traces import TraceStore

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
