"""Arithmetic and word problems with one numeric answer, checked exactly, no sandbox.

Tasks come from parameterised families (names, items and numbers drawn from a seed):
level 1 is one integer operation; level 2 a two- or three-step word problem with units
(prices and discounts, rates over time, change, distance); level 3 a multi-step problem
with fractions, percentages, remainders or a small linear system. Every answer is
computed with `fractions.Fraction`, so the stored answer is exact, never a float.

Answer format (stated in every prompt): the completion ends with a line
`Answer: <number>`. Each task says whether its answer is a whole number or is to be
rounded to 2 decimal places.

Verification reads the LAST line that starts with `Answer:` (case, markdown bold or
quote marks around it are tolerated) and nothing before it, so a completion cannot
hedge with several answer lines. The value must hold exactly one number: `1,234`,
`12.50`, `-3` and `3/4` are read; `12 or 13` is ambiguous and fails. Correctness:
  - whole-number tasks: the value must equal the answer exactly (`12.0` is 12);
  - 2-decimal tasks: |value - exact| <= 0.005, half of the last place the prompt asks
    for, measured against the exact (unrounded) answer. So both the rounded and a more
    precise value pass, and on an exact tie (x.xx5) either rounding passes, since the
    prompt does not say which tie rule to use.
If no `Answer:` line exists, the last `\\boxed{...}` is read instead (a common habit).

Reward = clip(outcome + penalty, -1, 1), outcome 1 for a correct answer else 0.
penalty = -0.1 when a correct answer was found but the required format was not met: the
answer line is not exactly `Answer: <plain number>` (units, `$`, bold, lower case) or
the answer came from `\\boxed{}`. It is charged only when the outcome is positive, so
a sloppy answer never ranks below no answer at all: 1 (right, formatted) > 0.9 (right,
sloppy) > 0 (wrong, ambiguous or missing). The same penalty and clip serve the extraction
and data domains (environments/scoring.py).

Verdicts: pass (correct), fail (wrong or ambiguous), no_code (here it means: no final
answer could be read, neither an `Answer:` line with a number nor a `\\boxed{}`).
What it does not do: it does not read a number from the reasoning text when no answer
line exists, and it does not grade the reasoning (process reward stays 0).
"""

from __future__ import annotations

import json
import math
import re
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from flywheel.environments.base import CheckEnvironment, Draft, GeneratedTasks, Score, reply
from flywheel.environments.scoring import clip_reward, format_penalty

DEC_TOLERANCE = Fraction(1, 200)  # half of 0.01, the place the 2-decimal prompts ask for

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jon",
         "Kemi", "Luca", "Maya", "Nils", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]  # fmt: skip
ITEMS = ["notebooks", "pens", "mugs", "candles", "plants", "scarves", "lamps", "books",
         "towels", "batteries", "puzzles", "teapots"]  # fmt: skip
MACHINES = [("pump", "litres"), ("printer", "pages"), ("bottling line", "bottles"),
            ("press", "sheets"), ("robot", "parts"), ("oven", "loaves")]  # fmt: skip
GADGETS = ["kettle", "bicycle", "camera", "jacket", "blender", "backpack", "monitor", "chair"]
VEHICLES = ["cyclist", "runner", "ferry", "tractor", "delivery van", "drone"]


def money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _pct(p: int) -> Fraction:
    return Fraction(p, 100)


# Each family: rng -> (content key, question, exact answer, kind "int" | "dec2").
# The key holds the family and the numbers, not the names: the same numbers dressed in
# other names are the same task for the train/eval split.
def _ask(rng, expr: str) -> str:
    return rng.choice(["What is {}?", "Compute {}.", "Calculate {}."]).format(expr)


def add(rng):
    a, b = rng.randint(100, 9999), rng.randint(100, 9999)
    return f"add{a},{b}", _ask(rng, f"{a} + {b}"), Fraction(a + b), "int"


def sub(rng):
    a, b = rng.randint(10, 5000), rng.randint(10, 5000)
    return f"sub{a},{b}", _ask(rng, f"{a} - {b}"), Fraction(a - b), "int"


def mul(rng):
    a, b = rng.randint(12, 99), rng.randint(12, 999)
    return f"mul{a},{b}", _ask(rng, f"{a} × {b}"), Fraction(a * b), "int"


def div(rng):
    b, q = rng.randint(3, 25), rng.randint(12, 999)
    return f"div{b * q},{b}", f"What is {b * q} divided by {b}?", Fraction(q), "int"


def discount(rng):
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    n, cents, d = rng.randint(2, 12), rng.randint(150, 4999), rng.choice([5, 10, 15, 20, 25, 30, 40])
    q = (f"{name} buys {n} {item} at ${money(cents)} each. The shop takes {d}% off the whole "
         f"order. How many dollars does {name} pay?")  # fmt: skip
    return f"disc{n},{cents},{d}", q, Fraction(n * cents, 100) * (1 - _pct(d)), "dec2"


def rate_time(rng):
    machine, unit = rng.choice(MACHINES)
    r, h, m = rng.randint(3, 60), rng.randint(1, 9), rng.choice([10, 15, 20, 30, 40, 45, 50])
    q = f"A {machine} produces {r} {unit} per minute. How many {unit} does it produce in {h} hours and {m} minutes?"
    return f"rate{r},{h},{m}", q, Fraction(r * (60 * h + m)), "int"


def change(rng):
    name = rng.choice(NAMES)
    i1, i2 = rng.sample(ITEMS, 2)
    n1, n2, c1, c2 = rng.randint(1, 5), rng.randint(1, 5), rng.randint(99, 1999), rng.randint(99, 1999)
    total = n1 * c1 + n2 * c2
    bill = next(b for b in (2000, 5000, 10000, 20000) if b > total)
    q = (f"{name} buys {n1} {i1} at ${money(c1)} each and {n2} {i2} at ${money(c2)} each, and "
         f"pays with a ${bill // 100} note. How much change, in dollars, does {name} get?")  # fmt: skip
    return f"change{n1},{c1},{n2},{c2},{bill}", q, Fraction(bill - total, 100), "dec2"


def distance(rng):
    who = rng.choice(VEHICLES)
    v, t1, w, t2 = rng.randint(8, 60), rng.randint(10, 150), rng.randint(8, 60), rng.randint(10, 150)
    q = (f"A {who} travels at {v} km/h for {t1} minutes, then at {w} km/h for {t2} minutes. "
         "How many kilometres does it travel in total?")  # fmt: skip
    return f"dist{v},{t1},{w},{t2}", q, Fraction(v * t1 + w * t2, 60), "dec2"


def buses(rng):
    k, s, a, c = rng.randint(3, 12), rng.randint(18, 32), rng.randint(0, 15), rng.randint(12, 50)
    ask_left = rng.random() < 0.5
    riders = k * s - a
    q = f"A school has {k} classes of {s} pupils; {a} pupils are absent on trip day. The rest travel in buses with {c} seats each. "
    if ask_left:  # fill buses one after the other: how many ride in the last one?
        q += "The buses are filled one at a time. How many pupils ride in the last bus?"
        ans = riders % c or c
    else:
        q += "How many buses are needed?"
        ans = math.ceil(riders / c)
    return f"bus{k},{s},{a},{c},{ask_left}", q, Fraction(ans), "int"


def tank(rng):
    name = rng.choice(NAMES)
    cap = rng.randint(4, 60) * 10
    p, qd = rng.choice([(1, 2), (2, 3), (3, 4), (3, 5), (4, 5), (5, 8), (7, 10)])
    u, v = rng.choice([(1, 3), (1, 4), (2, 5), (1, 6), (3, 8)])
    left = Fraction(cap * p, qd) * (1 - Fraction(u, v))
    added = rng.randint(1, max(1, min(40, math.floor(cap - left))))  # never more than the tank holds
    water = left + added
    q = (f"A tank holds {cap} litres and is {p}/{qd} full. {name} uses {u}/{v} of the water in it, "
         f"then adds {added} litres. How many litres are in the tank now?")  # fmt: skip
    return f"tank{cap},{p},{qd},{u},{v},{added}", q, water, "dec2"


def percent_chain(rng):
    item = rng.choice(GADGETS)
    cents, up, down, tax = rng.randint(500, 20000), rng.randint(5, 40), rng.randint(5, 40), rng.choice([5, 6, 8, 10, 12, 20])
    price = Fraction(cents, 100) * (1 + _pct(up)) * (1 - _pct(down)) * (1 + _pct(tax))
    q = (f"A {item} costs ${money(cents)}. Its price rises by {up}%, then the new price is cut by "
         f"{down}%. At the till, {tax}% sales tax is added. What is the final price in dollars?")  # fmt: skip
    return f"pct{cents},{up},{down},{tax}", q, price, "dec2"


def tickets(rng):
    a, c = rng.sample(range(4, 30), 2)
    adults, kids = rng.randint(5, 200), rng.randint(5, 200)
    ask_kids = rng.random() < 0.5
    q = (f"Adult tickets cost ${a} and child tickets cost ${c}. {adults + kids} tickets were sold "
         f"for ${a * adults + c * kids} in total. How many {'child' if ask_kids else 'adult'} tickets were sold?")  # fmt: skip
    return f"tix{a},{c},{adults},{kids},{ask_kids}", q, Fraction(kids if ask_kids else adults), "int"


FAMILIES = {
    1: [add, sub, mul, div],
    2: [discount, rate_time, change, distance],
    3: [buses, tank, percent_chain, tickets],
}

HOW = {
    "int": "The answer is a whole number.",
    "dec2": "Give the answer rounded to 2 decimal places.",
}


def display(exact: Fraction, kind: str) -> str:
    """The reference answer as the prompt asks for it (2 decimals rounded half up)."""
    if kind == "int":
        return str(exact.numerator)
    d = Decimal(exact.numerator) / Decimal(exact.denominator)
    return str(d.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


NUMBER = re.compile(r"(?<![\d./])-?(?:\d+\s*/\s*\d+|(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?![\d/])")
ANSWER_LINE = re.compile(r"^[ \t>*#_`-]*(?:final[ \t]+)?answer[ \t*_`]*:[ \t*_`]*(.*)$", re.IGNORECASE | re.MULTILINE)
STRICT_LINE = re.compile(r"^Answer: ?(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\d+/\d+)\.?[ \t]*$")
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def _to_fraction(token: str) -> Fraction | None:
    token = token.replace(",", "").replace(" ", "")
    try:
        return Fraction(token)  # reads "12.50", "-3", "3/4" exactly
    except (ValueError, ZeroDivisionError):
        return None


def read_answer(completion: str) -> tuple[Fraction | None, bool, str]:
    """(value, format_ok, error). value None: no answer (error says why); format_ok False
    with a value: the answer was read from a line that breaks the stated format."""
    lines = list(ANSWER_LINE.finditer(completion))
    if lines:
        raw = lines[-1].group(1)
        format_ok = STRICT_LINE.match(lines[-1].group(0).strip()) is not None
    else:
        boxed = BOXED.findall(completion)
        if not boxed:
            return None, False, "no 'Answer:' line and no \\boxed{} answer"
        raw, format_ok = boxed[-1], False
    numbers = NUMBER.findall(raw.replace("−", "-"))
    if not numbers:
        return None, False, f"the final answer holds no number: {raw.strip()[:80]!r}"
    if len(numbers) > 1:
        return None, format_ok, f"ambiguous: the final answer holds {len(numbers)} numbers: {raw.strip()[:80]!r}"
    value = _to_fraction(numbers[0])
    if value is None:
        return None, format_ok, f"not a number: {numbers[0]!r}"
    return value, format_ok, ""


def is_correct(value: Fraction, exact: Fraction, kind: str) -> bool:
    return value == exact if kind == "int" else abs(value - exact) <= DEC_TOLERANCE


class MathReasoning(GeneratedTasks, CheckEnvironment):
    name = "math"
    version = "1"
    levels = (1, 2, 3)

    def generate(self, level, rng):
        family = rng.choice(FAMILIES[level])
        key, question, exact, kind = family(rng)
        user = (
            f"{question}\n\n{HOW[kind]} Show your working, then end your reply with a final line "
            "of the form `Answer: <number>`, where <number> is a plain number (no units or currency signs)."
        )
        prompt = [
            {"role": "system", "content": "You are a careful maths tutor."},
            {"role": "user", "content": user},
        ]
        verifier = {"exact": str(exact), "kind": kind, "answer": display(exact, kind)}
        return Draft(
            f"{family.__name__}:{key}", prompt, setup={"tools": [], "answer_format": "Answer: <number>"},
            verifier=verifier,
        )

    def check(self, task, completion):
        v = json.loads(task.verifier_json)
        value, format_ok, error = read_answer(completion)
        if value is None:
            verdict = "fail" if error.startswith(("ambiguous", "not a number")) else "no_code"
            return Score(0.0, verdict, outcome=0.0, tests_total=1, error=error)
        ok = is_correct(value, Fraction(v["exact"]), v["kind"])
        outcome = 1.0 if ok else 0.0
        penalty = format_penalty(outcome, kept=format_ok)
        reward = clip_reward(outcome + penalty)
        error = "" if ok else f"expected {v['answer']}, got {value if value.denominator == 1 else float(value)}"
        return Score(
            reward, "pass" if ok else "fail", outcome=outcome, penalty=penalty,
            tests_passed=int(ok), tests_total=1, error=error,
        )  # fmt: skip

    def reference(self, task):
        """The operation and its result for one-operation tasks, else the result alone; then
        the answer line. No worked steps for word problems: we keep none."""
        answer = json.loads(task.verifier_json)["answer"]
        question = task.prompt[-1]["content"]
        op = re.search(r"(\d+) ([-+×]) (\d+)", question) or re.search(r"(\d+) (divided by) (\d+)", question)
        working = f"{op.group(1)} {op.group(2)} {op.group(3)} = {answer}" if op else f"The result is {answer}."
        return reply(f"{working}\nAnswer: {answer}")
