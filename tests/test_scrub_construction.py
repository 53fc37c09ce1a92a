"""How the scrubber stays linear and fast without finding less (flywheel/production/scrub_detectors.py,
scrub_patterns.py, scrub_personal.py, scrub_skeleton.py): every pattern run over a whole text has
bounded repeats, and each shortcut (windows around literals, the secret gate, searches from rare
characters, the skeleton, the digit-run sorting) finds exactly what the plain scan finds, on fuzzed
text. What is found and what must stay is tests/test_scrub.py."""

from __future__ import annotations

import random
import re
from collections import Counter

from flywheel.production import scrub_detectors, scrub_personal
from tests.test_scrub import SECRET_CASES


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
        "sk_live_" + token[:30],
        "rk_live_" + token[:24],
        "sk-proj-" + token[:60],
        "-sk-" + token[:40],
        "12345678:" + token[:35] + "_-" + token[:8],
        "9" * 11 + ":" + token[:36],
        token[:32] + "-us12",
        "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
        "AWS key: '" + token[:40] + "'",
        'aws_secret = "' + token[:40] + '"',
        "ok. 14:30 v1.2.3 sk- pk- k_live_ :",
        " ",
        "\n",
        "_",
        "x" * 200,
    ]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        low = text.lower()
        for g in windowed:
            assert [m.span() for m in g.matches(text, low)] == [m.span() for m in g.pattern.finditer(text)], (
                g.pattern.pattern,
                text,
            )


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
    from flywheel.production.scrub_skeleton import LOOK_ALIKE, SKELETON, skeleton

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
    from flywheel.production.scrub_patterns import word_trie

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
