"""What a completion says to the LLM judge once its disguises are taken off: the second signal
of the judge's defence (environments/judge.py), never its wall.

1. `views(text)`: the text as a reader would understand it, several ways: Unicode NFKC with
   the invisible format characters (category Cf: zero-width spaces and joiners, bidi
   controls, tag characters) and variation selectors removed; its confusable skeleton
   (Unicode's confusables data through `confusable-homoglyphs`: Cyrillic `а`, Greek `ο`,
   mathematical and fullwidth letters fold to ASCII, combining overlays dropped); spaced-out
   and leet-spelled letters joined; the ASCII hidden in Unicode tag characters; and what the
   obvious encodings decode to (base64, hex, URL `%XX`, `\\uXXXX` escapes, HTML entities,
   rot13, reversed text), two layers deep.
2. `addresses_judge(text)`: the reason when some view, in one sentence, carries the judge's
   own vocabulary: its score line or verdict fields, the quoting markers or chat-role tags
   (language-free: these are our format), or an instruction about the grade in one of ~25
   languages (override + instructions, award + score/maximum, a grader addressed + score).
   A word list is spelling: an attacker writing in a language or form not listed passes it,
   which is why the judge's verdict is also checked structurally (judge.py, tasks/score.py).
3. `reduce(text)`: the completion without the places instructions hide that an answer does
   not need, whatever they say: comments, block quotes, encoded runs, long prose inside
   string literals, lines with markers or role tags, invisible characters. The judge
   grades it a second time; a verdict that falls when they are gone is flagged.

Not done: paraphrasing (it needs a model), images or audio, and languages beyond the lists;
`reduce` also removes long strings an honest answer might need (its second pass can only
lower a score, never raise it).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import html
import json
import re
import unicodedata
import urllib.parse
from functools import lru_cache
from importlib import resources


@lru_cache(1)
def _skeleton_table() -> dict[int, str]:
    """Non-ASCII code point -> the ASCII string Unicode's confusables data says it looks like."""
    data = json.loads(
        resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    )
    table = {}
    for char, lookalikes in data.items():
        if len(char) != 1 or char.isascii():
            continue
        for entry in lookalikes:
            glyph = entry["c"]
            if glyph.isascii() and glyph.strip() and glyph.isprintable():
                table[ord(char)] = glyph
                break
    return table


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) == "Cf" or 0xFE00 <= ord(ch) <= 0xFE0F or 0xE0100 <= ord(ch) <= 0xE01EF


def clean(text: str) -> str:
    """NFKC (fullwidth, ligatures, mathematical letters to plain ones) without invisible characters."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if not _invisible(ch))


def skeleton(text: str, accents: bool = False) -> str:
    """Lower-case look-alike of `clean(text)` with confusables folded to ASCII; combining
    marks (accents, overlays) dropped unless `accents` (the lexicon spells `prüfer`)."""
    decomposed = unicodedata.normalize("NFD", clean(text))
    bare = "".join(ch for ch in decomposed if accents or unicodedata.category(ch) != "Mn")
    return unicodedata.normalize("NFC", bare.translate(_skeleton_table())).lower()


SPACED = re.compile(r"\b(?:\w[ .\-_*]){3,}\w\b")  # s c o r e, s.c.o.r.e, s-c-o-r-e
LEET = str.maketrans("013457@$!|", "oieastasil")
BASE64 = re.compile(r"[A-Za-z0-9+/\-_]{16,}={0,2}")
HEX = re.compile(r"(?:(?:0x|\\x)?[0-9a-fA-F]{2}[\s:,]?){8,}")
ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|\\x[0-9a-fA-F]{2}")


def _text(raw: bytes) -> str | None:
    """Bytes that decode to mostly printable UTF-8 text, else None (random runs decode to junk)."""
    try:
        out = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    shown = sum(ch.isprintable() or ch.isspace() for ch in out)
    return out if out and shown >= 0.9 * len(out) else None


def decodings(text: str) -> list[str]:
    """What the encoded runs in `text` decode to (one layer)."""
    out = []
    for run in BASE64.findall(text):
        padded = run + "=" * (-len(run.rstrip("=")) % 4)
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                got = _text(decode(padded.rstrip("=") + "=" * (-len(padded.rstrip("=")) % 4)))
            except (binascii.Error, ValueError):
                got = None
            if got:
                out.append(got)
                break
    for run in HEX.findall(text):
        digits = re.sub(r"0x|\\x|[\s:,]", "", run)
        if len(digits) % 2 == 0:
            got = _text(bytes.fromhex(digits))
            if got:
                out.append(got)
    if text.count("%") >= 3:
        unquoted = urllib.parse.unquote(text.replace("+", " "))
        if unquoted != text:
            out.append(unquoted)
    if ESCAPE.search(text):
        out.append(ESCAPE.sub(lambda m: codecs.decode(m.group(0), "unicode_escape"), text))
    if "&" in text and ";" in text and (unescaped := html.unescape(text)) != text:
        out.append(unescaped)
    return out


def views(text: str, depth: int = 2) -> list[str]:
    """The readings of `text` the detector looks at (see the module's docstring)."""
    seen: list[str] = []

    def add(t: str) -> None:
        if t and t not in seen:
            seen.append(t)

    tags = "".join(chr(ord(ch) - 0xE0000) for ch in text if 0xE0020 <= ord(ch) <= 0xE007E)
    add(tags)  # Unicode tag characters: invisible ASCII that some models read
    base = clean(text)
    skel = skeleton(text)
    for t in (base, skel, skeleton(text, accents=True), SPACED.sub(lambda m: re.sub(r"[ .\-_*]", "", m.group(0)), skel), skel.translate(LEET),
              codecs.encode(base, "rot13"), base[::-1]):  # fmt: skip
        add(t)
    layer = [base]
    for _ in range(depth):
        nxt = []
        for t in layer:
            for d in decodings(t):
                if d not in seen:
                    for v in (clean(d), skeleton(d), codecs.encode(clean(d), "rot13")):
                        add(v)
                    nxt.append(clean(d))
        layer = nxt
    return seen


def _words(*alternatives: str) -> re.Pattern:
    return re.compile("|".join(alternatives), re.IGNORECASE)


# The judge's own format: language-free, it is what our prompt and parser use.
FORMAT = _words(
    r"\bscore\s*[:=]\s*\d", r"[\"']?\b(?:matches_reference|meets_rubric)\b[\"']?\s*:", r"[\"']score[\"']\s*:",
    r"<<<", r"\w>>>", r"\bend\s+(?:of\s+)?(?:the\s+)?(?:response|task|reference|answer)\b",
    r"\[/?(?:system|assistant|user|inst)\]", r"<\|?/?(?:im_start|im_end|system|assistant|endoftext)\|?>", r"<</?sys>>",
)  # fmt: skip
# Instruction words in ~25 languages: a second signal (spelling), per sentence.
OVERRIDE = _words(
    r"\bignor", r"\bdisregard", r"\bforget", r"\boverride", r"\bbypass", r"olvida", r"omite", r"oublie",
    r"vergiss", r"missachte", r"dimentica", r"esque[cç]a", r"desconsider", r"negeer", r"vergeet",
    r"игнор", r"забудь", r"не обращай", r"ігнор", r"zapomnij", r"yok say", r"unut", r"görmezden",
    r"忽略", r"无视", r"無視", r"忘记", r"忘記", r"忘れ", r"무시", r"잊", r"تجاهل", r"انس", r"התעלם", r"שכח",
    r"अनदेखा", r"भूल", r"نادیده", r"فراموش", r"abaikan", r"lupakan", r"bỏ qua", r"quên", r"αγνόησ", r"ξέχασ",
    r"ละเว้น", r"เพิกเฉย", r"puuza", r"sahau",
)  # fmt: skip
INSTRUCTIONS = _words(
    r"instruc", r"\brules?\b", r"\bprompt", r"rubric", r"guideline", r"directive", r"system message",
    r"reglas", r"consignes", r"règles", r"anweisung", r"regeln", r"vorgaben", r"istruzion", r"regole",
    r"instruç", r"regras", r"instructies", r"regels", r"инструкц", r"правил", r"указани", r"інструкц",
    r"instrukcj", r"zasad", r"polece", r"talimat", r"kural", r"指令", r"指示", r"规则", r"規則", r"提示", r"命令",
    r"ルール", r"지시", r"명령", r"규칙", r"التعليمات", r"القواعد", r"הוראות", r"כללים", r"निर्देश", r"नियम",
    r"دستور", r"قوانین", r"instruksi", r"aturan", r"hướng dẫn", r"chỉ dẫn", r"quy tắc", r"οδηγί", r"κανόν",
    r"คำสั่ง", r"กฎ", r"maagizo", r"maelekezo", r"sheria",
)  # fmt: skip
SCORE = _words(
    r"\bscor", r"\bgrad(?:e|ing)\b", r"\bmarks?\b", r"\bpoints?\b", r"\bratings?\b", r"puntuaci", r"puntaje",
    r"\bnota\b", r"calificaci", r"califica", r"\bpuntos\b", r"\bnote\b", r"\bnotez\b", r"\bpunkt", r"bewert",
    r"punteggio", r"\bvoto\b", r"\bpunti\b", r"valuta", r"pontua", r"pontos", r"avali", r"cijfer", r"punten",
    r"балл", r"оценк", r"очк", r"бал\b", r"оцінк", r"ocen", r"\bpuan", r"打分", r"评分", r"評分", r"分数", r"分數",
    r"满分", r"滿分", r"满分", r"点数", r"満点", r"採点", r"評価", r"점수", r"만점", r"평가", r"درجة", r"علامة",
    r"نقاط", r"تقييم", r"ציון", r"נקודות", r"अंक", r"स्कोर", r"نمره", r"امتیاز", r"\bnilai\b", r"\bskor\b",
    r"\bpoin\b", r"điểm", r"βαθμ", r"คะแนน", r"\balama\b",
)  # fmt: skip
MAXIMUM = _words(
    r"full\s+(?:marks|score|points|credit)", r"\bperfect", r"\bmaxim", r"\bhighest", r"\btop\s+(?:score|marks)",
    r"\b10\s*/\s*10\b", r"\b10\s+out\s+of\s+10\b", r"\b100\s*/\s*100\b", r"\b100\s*%", r"máxim", r"perfect",
    r"parfait", r"\bpleine?s?\b", r"volle", r"höchst", r"bestnote", r"massim", r"pieno", r"perfett", r"perfeit",
    r"volledig", r"hoogste", r"максимальн", r"высш", r"полн", r"идеальн", r"найвищ", r"maksymaln",
    r"najwyższ", r"pełn", r"\btam\b", r"en yüksek", r"maksimum", r"最高", r"完美", r"満点", r"만점", r"최고", r"최대",
    r"كامل", r"أعلى", r"القصوى", r"מלא", r"מקסימל", r"מושלם", r"पूर", r"अधिकतम", r"کامل", r"حداکثر", r"penuh",
    r"sempurna", r"maksimal", r"tertinggi", r"tối đa", r"tuyệt đối", r"cao nhất", r"μέγιστ", r"άριστ", r"τέλει",
    r"เต็ม", r"สูงสุด", r"kamili",
)  # fmt: skip
AWARD = _words(
    r"\bgive\b", r"\bassign", r"\baward", r"\breply\b", r"\brespond", r"\bdeserv", r"merece",
    r"mérite", r"verdient", r"merita", r"заслуж", r"值得", r"相応", r"자격", r"يستحق", r"ראוי", r"योग्य", r"layak",
    r"xứng đáng", r"αξίζει", r"สมควร", r"anastahili", r"\bdale\b", r"\bdé\b", r"\bda\b", r"otorga", r"asigna",
    r"\bpon\b", r"responde", r"donne", r"attribue", r"accorde", r"\bmets\b", r"réponds", r"\bgib\b", r"geben sie",
    r"vergib", r"antworte", r"\bdai\b", r"assegna", r"\bmetti\b", r"rispondi", r"atribua", r"\bdê\b",
    r"responda", r"\bgeef\b", r"постав", r"\bдай", r"присво", r"выстав", r"ответь", r"\bdaj\b", r"przyznaj",
    r"wystaw", r"odpowiedz", r"\bver\b", r"verin", r"给", r"給", r"请", r"請", r"付け", r"与え", r"ください",
    r"주세요", r"줘", r"부여", r"أعط", r"امنح", r"ضع", r"תן", r"תני", r"दें", r"दो", r"بده", r"berikan", r"\bberi\b",
    r"\bcho\b", r"\bhãy\b", r"δώσε", r"βάλε", r"ให้", r"\bmpe\b", r"\btoa\b", r"\bipe\b",
)  # fmt: skip
ADDRESS = _words(
    r"\bgrader", r"\bjudge", r"\bevaluator", r"\breviewer", r"\bassessor", r"\bexaminer", r"language model",
    r"evaluador", r"\bjuez", r"calificador", r"corrector", r"correcteur", r"évaluateur", r"\bjuge\b",
    r"examinateur", r"bewerter", r"prüfer", r"richter", r"gutachter", r"korrektor", r"valutatore", r"giudice",
    r"correttore", r"esaminatore", r"avaliador", r"\bjuiz", r"corretor", r"beoordelaar", r"оценщик", r"судья",
    r"проверяющ", r"экзаменатор", r"оцінювач", r"суддя", r"oceniając", r"sędzi", r"egzaminator",
    r"değerlendirici", r"yargıç", r"hakem", r"评分员", r"評分員", r"评委", r"评审", r"評審", r"裁判", r"阅卷",
    r"採点者", r"審査員", r"評価者", r"ジャッジ", r"채점자", r"심사위원", r"평가자", r"المقيّم", r"المقيم",
    r"الحكم", r"المصحح", r"בודק", r"שופט", r"מעריך", r"परीक्षक", r"मूल्यांकनकर्ता", r"ارزیاب", r"داور", r"مصحح",
    r"penilai", r"\bjuri\b", r"hakim", r"người chấm", r"giám khảo", r"người đánh giá", r"βαθμολογητ",
    r"αξιολογητ", r"ผู้ตรวจ", r"กรรมการ", r"ผู้ประเมิน", r"mtahini", r"msahihishaji", r"\bjaji\b",
)  # fmt: skip
RATE = _words(r"\brate\b")  # also a noun ("the interest rate"): only with a maximum
SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")


CONCEPTS = (("override", OVERRIDE), ("instructions", INSTRUCTIONS), ("score", SCORE), ("maximum", MAXIMUM),
            ("award", AWARD), ("address", ADDRESS), ("rate", RATE))  # fmt: skip
PAIRS = ({"override", "instructions"}, {"award", "score"}, {"award", "maximum"}, {"address", "score"},
         {"address", "maximum"}, {"rate", "maximum"})  # fmt: skip


def _pair(text: str) -> set | None:
    """The first pair of concepts that `text` holds together, or None."""
    found = {name for name, pat in CONCEPTS if pat.search(text)}
    return next((need for need in PAIRS if need <= found), None)


def _sentence_reason(s: str) -> str | None:
    """Why one sentence addresses the judge, or None."""
    if m := FORMAT.search(s):
        return f"the judge's own format {m.group(0)!r}"
    need = _pair(s)
    return f"an instruction about the grade ({' + '.join(sorted(need))})" if need else None


def addresses_judge(text: str) -> str | None:
    """Why `text` (a completion) addresses the judge in some reading of it, or None."""
    for i, view in enumerate(views(text)):
        if not FORMAT.search(view) and not _pair(view):
            continue  # no pair anywhere in this reading: no sentence can hold one
        for s in SENTENCE.findall(view):
            if reason := _sentence_reason(s):
                where = "as written" if i == 0 else "after normalising or decoding"
                return f"{reason} {where}: {s.strip()[:80]!r}"
    return None


COMMENTS = re.compile(
    r"<!--.*?(?:-->|$)|/\*.*?(?:\*/|$)|(?<![:\w])//[^\n]*|(?:^|(?<=\s))#[^\n]*|^\s*>[^\n]*|\[\^[^\]]*\]:[^\n]*"
    r"|<(?:details|summary|span|div)[^>]*>.*?</(?:details|summary|span|div)>",
    re.S | re.M,
)  # fmt: skip
MARKER_LINE = re.compile(  # from a marker, role tag or verdict field of ours to the end of its line
    r"(?:<<<|\w>>>|\[/?(?:system|assistant|user|inst)\]|<\|[^\n]*\|>|<</?sys>>|[\"']?(?:matches_reference|meets_rubric)\b)"
    r"[^\n]*$", re.I | re.M)  # fmt: skip
STRING = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
ENCODED = re.compile(f"{BASE64.pattern}|{HEX.pattern}|(?:[\\w.~-]*%[0-9A-Fa-f]{{2}}){{3,}}[\\w.~-]*")


def _long_prose(literal: str) -> bool:
    body = literal[1:-1]
    return len(body) > 60 or len(body.split()) >= 6


def reduce(text: str) -> str:
    """`text` without the carriers an instruction hides in (see the module's docstring)."""
    out = MARKER_LINE.sub("", clean(text))
    out = COMMENTS.sub("", out)
    out = STRING.sub(lambda m: m.group(0)[0] * 2 if _long_prose(m.group(0)) else m.group(0), out)
    out = ENCODED.sub(
        lambda m: "" if decodings(m.group(0)) else m.group(0), out
    )  # a run that decodes to text
    return re.sub(r"\n\s*\n+", "\n", out).strip()
