"""Scrubbing throughput: MB/s of realistic trace text, and linear time on hostile text.

Writes `--mb` MB of JSONL Data Flywheel Blueprint records (support and invoice chats in several
languages, code, log lines, JSON tool calls; amounts, dates, order ids, versions and git SHAs that
must stay; one record in ~20 with a secret or personal datum of a random kind) and times, best
of `--rounds`, each with a fresh Scrubber (its cache empty), in wall and in CPU time:
`Scrubber.scrub_value` over every record (the call `parse_record` makes) with one Scrubber for
the file (as flows/ingest.py) and with a fresh one per record (nothing cached), `Scrubber.scrub` over
the message texts one by one, and over the texts joined into one string (no per-string cost).
Then times `Scrubber.scrub` on hostile single strings of 1 MB and 2 MB each (runs of one
character, of "eyJ", of "password", of '@', of digits...): the 2 MB time over the 1 MB time is
~2 when the scrubber is linear (the regex scrubber it replaced took > 30 s on one 2 MB message).

    .venv/bin/python bench/scrub.py [--mb 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flywheel.production.scrub import Scrubber

PROSE = [
    "Thanks for reaching out! I checked your account and the refund was issued on {date}.",
    "The invoice {inv} from {vendor} lists {qty} items, total {amount} EUR, due {date}.",
    "Can you summarise the attached report? Revenue grew {pct}% year over year to {amount} USD.",
    "Bonjour, la facture {inv} de {vendor} indique un total de {amount} EUR payable le {date}.",
    "Hallo, bitte prüfen Sie die Bestellung {order} vom {date}; der Betrag ist {amount} EUR.",
    "Upgrade to version {ver} fixed the crash; see commit {sha} for the details.",
    "Order {order} shipped in {qty} parcels; tracking updates every {qty} hours.",
    "こんにちは、注文番号 {order} の配送状況を確認しました。",
    "The meeting moved to {date} at 14:30; bring the Q3 numbers ({amount} total).",
]
CODE = [
    "def total(items):\n    return sum(i.price * i.qty for i in items)  # {ver}\n",
    "for (let i = 0; i < rows.length; i++) {{ sum += rows[i].amount; }}",
    "SELECT id, total FROM invoices WHERE created_at > '{date}' AND total > {amount};",
    "2026-12-06T10:{qty:02d}:00Z INFO worker-{qty} processed batch {order} in 0.{qty}s",
]
SECRETS = [
    "my key is sk-proj-{r40}", "export AWS_ACCESS_KEY_ID=AKIA{R16}", "token ghp_{r36}",
    "github_pat_{r22}_{r59}", "Stripe: sk_live_{r24}", "password: \"{words}\"", "my password is {r12}",
    "Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Bearer {r40}", "postgres://admin:{r12}@db:5432/app",
    "mail me at jane.{r6}@example.com", "call +44 20 7946 0{d3}", "ring 030 1234 5{d3}", "(415) 555-0{d3}",
    "card 4111 1111 1111 1111", "IBAN DE89 3704 0044 0532 0130 00",
]  # fmt: skip
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def fill(rng: random.Random, template: str) -> str:
    return template.format(
        date=f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", inv=f"INV-{rng.randint(1000, 99999)}",
        vendor=rng.choice(["Acme", "Globex", "Initech", "Umbrella"]), qty=rng.randint(1, 59),
        amount=f"{rng.randint(10, 99999):,}.{rng.randint(0, 99):02d}", pct=rng.randint(1, 40),
        order=rng.randint(10**8, 10**13), ver=f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
        sha="".join(rng.choice("0123456789abcdef") for _ in range(40)),
        words=" ".join(rng.choice(["correct", "horse", "battery", "staple", "blue"]) for _ in range(3)),
        r6="".join(rng.choice(ALNUM[:26]) for _ in range(6)), d3=f"{rng.randint(0, 999):03d}",
        **{f"r{n}": "".join(rng.choice(ALNUM) for _ in range(n)) for n in (12, 22, 24, 36, 40, 59)},
        R16="".join(rng.choice(ALNUM[26:]) for _ in range(16)),
    )  # fmt: skip


def record(rng: random.Random, i: int) -> dict:
    user = " ".join(fill(rng, rng.choice(PROSE)) for _ in range(rng.randint(2, 8)))
    if rng.random() < 0.3:
        user += "\n```\n" + fill(rng, rng.choice(CODE)) + "\n```"
    if rng.random() < 0.05:
        user += " " + fill(rng, rng.choice(SECRETS))
    args = json.dumps(
        {
            "invoice": fill(rng, "{inv}"),
            "amount": rng.randint(10, 99999),
            "note": fill(rng, rng.choice(PROSE)),
        }
    )
    return {
        "timestamp": 1764633600 + i, "workload_id": "support", "client_id": f"c{i % 50}",
        "request": {"model": "prod", "temperature": 0.2, "messages": [
            {"role": "system", "content": "You are a helpful billing assistant. Reply in the user's language."},
            {"role": "user", "content": user}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": fill(rng, rng.choice(PROSE)),
                                              "tool_calls": [{"id": f"t{i}", "type": "function",
                                                              "function": {"name": "lookup", "arguments": args}}]}}]},
        "feedback": {"rating": "up" if i % 5 else "down"},
    }  # fmt: skip


HOSTILE = {  # one string each, repeated to the size asked
    "one letter": "y", "words": "the quick brown fox ", "digits and spaces": "1234567 ", "eyJ": "eyJ",
    "password": "password", "password: ": "password: ", "at signs": "a@", "sk-": "sk-", "://": "://a",
    "a. (old: quadratic)": "a.", "a- (old: quadratic)": "a-", "escapes": "\\u0040", "key=": "key=", "-----BEGIN": "-----BEGIN RSA PRIVATE KEY-----",
}  # fmt: skip


def scrub_all(records: list, counts: Counter) -> list:
    """What flows/ingest.py does: one Scrubber for a whole file (keys, roles and system prompts
    that repeat in every record are scrubbed once)."""
    scrubber = Scrubber()
    return [scrubber.scrub_value(r, counts) for r in records]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rng = random.Random(0)
    path = Path(tempfile.mkdtemp(prefix="bench-scrub-")) / "traces.jsonl"
    size, i = 0, 0
    with open(path, "w") as f:
        while size < args.mb * 2**20:
            line = json.dumps(record(rng, i), ensure_ascii=False) + "\n"
            f.write(line)
            size, i = size + len(line.encode()), i + 1
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    texts = [m["content"] for r in records for m in r["request"]["messages"]]
    texts += [r["response"]["choices"][0]["message"]["content"] for r in records]
    mb, text_mb = size / 2**20, sum(len(t.encode()) for t in texts) / 2**20
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time suffers under load; CPU time less)"
    )
    redactions = Counter()
    for name, size_mb, work in [
        ("records (scrub_value, one Scrubber per file, as the ingest)", mb, lambda c: scrub_all(records, c)),
        (
            "records (scrub_value, a fresh Scrubber per record)",
            mb,
            lambda c: [Scrubber().scrub_value(r, c) for r in records],
        ),  # fmt: skip
        ("message texts (scrub, one by one)", text_mb, lambda c: [Scrubber().scrub(t, c) for t in texts]),
        ("the texts joined (scrub, one string)", text_mb, lambda c: Scrubber().scrub("\n".join(texts), c)),
    ]:
        wall, cpu = 1e9, 1e9
        for _ in range(args.rounds):
            counts, w0, c0 = Counter(), time.perf_counter(), time.process_time()
            work(counts)
            wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
            redactions = redactions or counts
        print(f"{name}: {size_mb:.1f} MiB, {size_mb / wall:.1f} MiB/s wall ({wall:.2f} s), "
              f"{size_mb / cpu:.1f} MiB/s CPU ({cpu:.2f} s)")  # fmt: skip
    print(f"redactions in the records: {dict(sorted(redactions.items()))}")
    scrubber = Scrubber()
    for name, unit in HOSTILE.items():
        times = []
        for mib in (1, 2):
            text = unit * (mib * 2**20 // len(unit))
            t0 = time.process_time()
            scrubber.scrub(text, Counter())
            times.append(time.process_time() - t0)
        print(
            f"hostile {name!r:>22}: 1 MiB {times[0]:.2f} s, 2 MiB {times[1]:.2f} s CPU, ratio {times[1] / times[0]:.2f}"
        )


if __name__ == "__main__":
    main()
