"""Key-figure extraction: read a generated business document, reply with a JSON object.

Documents come from three kinds (quarterly report, invoice, product spec sheet), with
company names, models, dates and figures drawn from a seed. The prompt names each key,
its type, its unit and its period. Levels:
  1  2-3 fields stated plainly in a short paragraph, no distractors;
  2  4-6 fields in a paragraph plus a table, with distractors beside them: prior-year
     columns (in random column order), guidance, previous balances, the same figure in
     another unit (oz next to g), standby next to peak power, storage next to operating
     temperature;
  3  fields that need a small computation or normalisation: table "in thousands of USD"
     to dollars, totals over segments or line items, growth and margins in percent,
     due dates from payment terms, unit conversions (g -> kg, mAh x V -> Wh).

Verification (no sandbox): the LAST JSON object in the completion is read, whether in
a ```json fence or bare (the outermost object that ends last). Each requested key is
checked: numbers within the field's tolerance (relative 1e-6 for exact figures; half of
the last place for figures the prompt asks to round, e.g. 0.05 for "1 decimal"),
strings after case-folding and collapsing whitespace. Extra keys are ignored; a missing
key is a wrong field. outcome = fraction of fields right; verdict pass only when all are.
penalty = -0.1 (once) when a number field was given as a string ("$1,234.50", "12%")
and its value was right: it is counted right, because the figure was found, but the
stated format (JSON numbers, no units) was not kept. As in the math domain the penalty
is charged only on credited fields, so it never ranks an answer below no answer.
reward = clip(outcome + penalty, -1, 1) (penalty and clip: environments/scoring.py).
Verdicts: pass, fail, no_code (here: no JSON object found in the completion).
What it does not do: it does not accept nested objects ({"result": {...}}) or lists of
objects, and it does not give partial credit within one field.
"""

from __future__ import annotations

import datetime as dt
import json

from flywheel.environments.base import CheckEnvironment, Draft, GeneratedTasks, Score, reply
from flywheel.environments.parsing.json_object import check_field, find_last_object
from flywheel.environments.scoring import clip_reward, format_penalty

SYLLABLES = ["nor", "va", "lex", "tri", "del", "ka", "mon", "ri", "sol", "ter", "qua", "zen", "bri", "o", "fal"]
SUFFIXES = ["Systems", "Industries", "Labs", "Holdings", "Logistics", "Foods", "Energy", "Devices"]
SEGMENTS = ["Cloud", "Hardware", "Services", "Retail", "Licensing", "Consulting", "Payments", "Ads"]
PRODUCTS = ["drill", "speaker", "lantern", "router", "projector", "blender", "scanner", "camera"]
ITEMS = ["Consulting hours", "Server rack", "Cable kit", "Licence seat", "Support plan", "Sensor",
         "Training day", "Spare battery", "Mounting bracket", "Freight"]  # fmt: skip


def company(rng) -> str:
    word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
    return f"{word.capitalize()} {rng.choice(SUFFIXES)}"


def tenths(x: int) -> str:
    return f"{x // 10:,}.{x % 10}"


def dollars(cents: int) -> str:
    return f"{cents // 100:,}.{cents % 100:02d}"


def num(key, desc, value, tol=None):
    return (key, "number", desc, value, tol)


def text(key, desc, value):
    return (key, "string", desc, value, None)


def pick(rng, fields, lo, hi):
    """lo..hi of the candidate fields, in document order (the order is part of the task)."""
    chosen = set(rng.sample(range(len(fields)), rng.randint(lo, min(hi, len(fields)))))
    return [f for i, f in enumerate(fields) if i in chosen]


# Each kind: (rng, level) -> (title, document text, fields). A field is
# (key, "number" | "string", description for the prompt, value, absolute tolerance or None).
def report(rng, level):
    co, q, y = company(rng), rng.randint(1, 4), rng.randint(2018, 2025)
    period, prior_period = f"Q{q} {y}", f"Q{q} {y - 1}"
    if level < 3:  # figures in tenths of a million dollars
        rev, prev = rng.randint(800, 9000), rng.randint(800, 9000)
        op, prev_op = rng.randint(rev // 20, rev // 4), rng.randint(prev // 20, prev // 4)
        ni, prev_ni = rng.randint(op // 3, op * 9 // 10), rng.randint(prev_op // 3, prev_op * 9 // 10)
        eps, prev_eps, emp, prev_emp = rng.randint(5, 400), rng.randint(5, 400), rng.randint(120, 25000), rng.randint(120, 25000)
        guide = rev + rng.randint(-300, 500)
    if level == 1:
        doc = (f"{co} reported results for {period}. Revenue was ${tenths(rev)} million and net income "
               f"was ${tenths(ni)} million. At quarter end the company had {emp:,} employees.")  # fmt: skip
        fields = [text("company", "the reporting company's name", co),
                  num("revenue_musd", f"revenue for {period}, in millions of USD", rev / 10),
                  num("net_income_musd", f"net income for {period}, in millions of USD", ni / 10),
                  num("employees", "employees at quarter end", emp)]  # fmt: skip
        return f"{co} quarterly update", doc, pick(rng, fields, 2, 3)
    if level == 2:
        rows = [("Revenue ($M)", tenths(rev), tenths(prev)), ("Operating income ($M)", tenths(op), tenths(prev_op)),
                ("Net income ($M)", tenths(ni), tenths(prev_ni)), ("Diluted EPS ($)", dollars(eps), dollars(prev_eps)),
                ("Employees", f"{emp:,}", f"{prev_emp:,}")]  # fmt: skip
        flip = rng.random() < 0.5  # the prior-year column comes first in half the documents
        head = [prior_period, period] if flip else [period, prior_period]
        table = "\n".join([f"| Metric | {head[0]} | {head[1]} |", "|---|---|---|"] +
                          [f"| {m} | {(p if flip else c)} | {(c if flip else p)} |" for m, c, p in rows])  # fmt: skip
        doc = (f"{co} reported revenue of ${tenths(rev)} million for {period}, compared with "
               f"${tenths(prev)} million in {prior_period}. For the next quarter the company guides to "
               f"revenue of about ${tenths(guide)} million.\n\n{table}")  # fmt: skip
        fields = [num("revenue_musd", f"revenue for {period}, in millions of USD", rev / 10),
                  num("prior_year_revenue_musd", f"revenue for {prior_period}, in millions of USD", prev / 10),
                  num("operating_income_musd", f"operating income for {period}, in millions of USD", op / 10),
                  num("net_income_musd", f"net income for {period}, in millions of USD", ni / 10),
                  num("eps_usd", f"diluted EPS for {period}, in USD", eps / 100),
                  num("employees", f"employees at the end of {period}", emp),
                  num("guidance_musd", "revenue guidance for the next quarter, in millions of USD", guide / 10)]  # fmt: skip
        return f"{co} {period} results", doc, pick(rng, fields, 4, 6)
    segs = rng.sample(SEGMENTS, 3)  # level 3: thousands of USD, totals and ratios
    cur = [rng.randint(2000, 90000) for _ in segs]
    prev = [max(1000, c + rng.randint(-20000, 20000)) for c in cur]
    op_k = rng.randint(sum(cur) // 20, sum(cur) // 4)
    table = "\n".join([f"| Segment | {period} | {prior_period} |", "|---|---|---|"] +
                      [f"| {s} | {c:,} | {p:,} |" for s, c, p in zip(segs, cur, prev)])  # fmt: skip
    doc = (f"{co} — segment revenue (in thousands of USD, unaudited)\n\n{table}\n\n"
           f"Operating income for {period} was {op_k:,} (in thousands of USD).")  # fmt: skip
    total, prev_total = sum(cur) * 1000, sum(prev) * 1000
    fields = [num("total_revenue_usd", f"total revenue for {period} over all segments, in USD (not thousands)", total),
              num("revenue_growth_pct", f"growth of total revenue from {prior_period} to {period}, in percent, rounded to 1 decimal",
                  round((total - prev_total) * 100 / prev_total, 1), 0.05),
              num("operating_margin_pct", f"operating income as a percent of total revenue for {period}, rounded to 1 decimal",
                  round(op_k * 1000 * 100 / total, 1), 0.05),
              text("largest_segment", f"the segment with the highest revenue in {period}", segs[cur.index(max(cur))]),
              num("operating_income_usd", f"operating income for {period}, in USD (not thousands)", op_k * 1000)]  # fmt: skip
    return f"{co} segment report", doc, pick(rng, fields, 3, 5)


def invoice(rng, level):
    vendor, customer, number = company(rng), company(rng), f"INV-{rng.randint(10000, 99999)}"
    issue = dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))
    terms = rng.choice([14, 30, 45, 60])
    due = issue + dt.timedelta(days=terms)
    lines = [(name, rng.randint(1, 20), rng.randint(250, 50000)) for name in rng.sample(ITEMS, rng.randint(2, 5))]
    subtotal = sum(q * c for _, q, c in lines)
    rate = rng.choice([5, 8, 10, 12, 20])
    tax = (subtotal * rate + 50) // 100  # cents, rounded half up
    total, previous = subtotal + tax, rng.randint(1000, 500000)
    if level == 1:
        doc = f"Invoice {number} from {vendor} to {customer}. Total due: ${dollars(total)}."
        fields = [text("invoice_number", "the invoice number", number), text("vendor", "who issued the invoice", vendor),
                  num("total_due_usd", "the total due, in USD", total / 100)]  # fmt: skip
        return f"Invoice {number}", doc, pick(rng, fields, 2, 3)
    table = "\n".join(["| Item | Qty | Unit price ($) | Amount ($) |", "|---|---|---|---|"] +
                      [f"| {n} | {q} | {dollars(c)} | {dollars(q * c)} |" for n, q, c in lines])  # fmt: skip
    if level == 2:
        doc = (f"INVOICE {number}\nFrom: {vendor}\nBill to: {customer}\nIssued: {issue.isoformat()}\n"
               f"Due: {due.isoformat()}\n\n{table}\n\nSubtotal: ${dollars(subtotal)}\nTax ({rate}%): ${dollars(tax)}\n"
               f"Total: ${dollars(total)}\nPrevious balance (paid, not included): ${dollars(previous)}")  # fmt: skip
        fields = [text("invoice_number", "the invoice number", number), text("customer", "who is billed", customer),
                  text("due_date", "the due date, as YYYY-MM-DD", due.isoformat()),
                  num("subtotal_usd", "the subtotal before tax, in USD", subtotal / 100),
                  num("tax_usd", "the tax amount, in USD", tax / 100), num("total_usd", "the total of this invoice, in USD", total / 100),
                  text("vendor", "who issued the invoice", vendor)]  # fmt: skip
        return f"Invoice {number}", doc, pick(rng, fields, 4, 6)
    doc = (f"INVOICE {number}\nFrom: {vendor}\nBill to: {customer}\nDate of issue: {issue.strftime('%B')} {issue.day}, {issue.year}\n"
           f"Payment terms: net {terms} days from the date of issue\n\n{table}\n\n"
           f"Sales tax of {rate}% applies to the sum of all amounts (tax rounded to the cent).\n"
           f"Previous balance (paid, not included): ${dollars(previous)}")  # fmt: skip
    fields = [num("total_usd", "the total of this invoice including tax, in USD", total / 100, 0.005),
              num("total_units", "the total quantity over all line items", sum(q for _, q, _ in lines)),
              text("due_date", "the payment due date, as YYYY-MM-DD", due.isoformat()),
              num("tax_usd", "the tax amount, in USD", tax / 100, 0.005),
              text("largest_line_item", "the item whose line amount is highest", max(lines, key=lambda l: l[1] * l[2])[0])]  # fmt: skip
    if len({q * c for _, q, c in lines}) < len(lines):  # a tie would make the largest item ambiguous
        fields.pop()
    return f"Invoice {number}", doc, pick(rng, fields, 3, 5)


def spec_sheet(rng, level):
    maker, product = company(rng), rng.choice(PRODUCTS)
    model = f"{''.join(rng.choice('ABCDEFGHKMRSTX') for _ in range(2))}-{rng.randint(100, 9999)}"
    grams, w, h, d = rng.randint(80, 4000), rng.randint(20, 400), rng.randint(20, 400), rng.randint(20, 400)
    mah, volts = rng.randint(10, 200) * 100, rng.choice([3.7, 7.4, 11.1, 14.8])
    peak, standby = rng.randint(5, 200), rng.randint(1, 30) / 10
    op_lo, op_hi, st_lo, st_hi = rng.randint(-20, 5), rng.randint(35, 60), rng.randint(-40, -21), rng.randint(61, 85)
    if level == 1:
        doc = f"The {maker} {model} {product} weighs {grams} g and has a {mah:,} mAh battery."
        fields = [text("model", "the model designation", model), num("weight_g", "the weight, in grams", grams),
                  num("battery_mah", "the battery capacity, in mAh", mah)]  # fmt: skip
        return f"{model} product note", doc, pick(rng, fields, 2, 3)
    doc = (f"{maker} {model} {product} — specifications\nWeight: {grams:,} g ({grams / 28.3495:.1f} oz)\n"
           f"Dimensions (W x H x D): {w} x {h} x {d} mm\nBattery: {mah:,} mAh at {volts} V nominal\n"
           f"Power draw: {peak} W peak, {standby} W standby\nOperating temperature: {op_lo} °C to {op_hi} °C\n"
           f"Storage temperature: {st_lo} °C to {st_hi} °C")  # fmt: skip
    if level == 2:
        fields = [text("model", "the model designation", model), num("weight_g", "the weight, in grams", grams),
                  num("depth_mm", "the depth (D), in mm", d), num("battery_mah", "the battery capacity, in mAh", mah),
                  num("peak_power_w", "the peak power draw, in W", peak), num("standby_power_w", "the standby power draw, in W", standby),
                  num("min_operating_temp_c", "the lowest operating temperature, in °C", op_lo),
                  num("max_operating_temp_c", "the highest operating temperature, in °C", op_hi)]  # fmt: skip
        return f"{model} spec sheet", doc, pick(rng, fields, 4, 6)
    wh = mah * volts / 1000
    fields = [num("weight_kg", "the weight, in kilograms", grams / 1000),
              num("volume_cm3", "the volume of the bounding box W x H x D, in cubic centimetres", w * h * d / 1000),
              num("battery_wh", "the battery energy (capacity x nominal voltage), in Wh, rounded to 1 decimal", round(wh, 1), 0.05),
              num("runtime_h", "hours of running at peak power on a full battery, rounded to 1 decimal", round(wh / peak, 1), 0.05),
              num("operating_range_c", "the width of the operating temperature range, in °C", op_hi - op_lo)]  # fmt: skip
    return f"{model} spec sheet", doc, pick(rng, fields, 3, 5)


KINDS = [report, invoice, spec_sheet]


class DocExtraction(GeneratedTasks, CheckEnvironment):
    name = "extraction"
    version = "1"
    levels = (1, 2, 3)

    def generate(self, level, rng):
        kind = rng.choice(KINDS)
        title, doc, fields = kind(rng, level)
        keys = "\n".join(f"- `{k}` ({t}): {desc}" for k, t, desc, _, _ in fields)
        user = (
            f"Extract these fields from the document below into one JSON object with exactly these keys:\n{keys}\n\n"
            "Numbers must be JSON numbers: no units, currency signs or thousands separators. "
            "Reply with the JSON object in a ```json code block.\n\n"
            f"### {title}\n\n{doc}"
        )
        prompt = [
            {"role": "system", "content": "You extract figures from documents accurately."},
            {"role": "user", "content": user},
        ]
        verifier = {"fields": {k: {"type": t, "value": v, "tol": tol} for k, t, _, v, tol in fields}}
        return Draft(
            f"{kind.__name__}:{level}:{json.dumps(verifier, sort_keys=True)}", prompt,
            setup={"tools": [], "answer_format": "json", "keys": [f[0] for f in fields]}, verifier=verifier,
        )

    def reference(self, task):
        fields = json.loads(task.verifier_json)["fields"]
        return reply("```json\n" + json.dumps({k: f["value"] for k, f in fields.items()}, indent=2) + "\n```")

    def check(self, task, completion):
        fields = json.loads(task.verifier_json)["fields"]
        obj = find_last_object(completion)
        if obj is None:
            return Score(0.0, "no_code", tests_total=len(fields), error="no JSON object in the completion")
        right, wrong, stringly = 0, [], False
        for key, spec in fields.items():
            ok, as_string = check_field(spec, obj.get(key)) if key in obj else (False, False)
            right += ok
            stringly |= as_string
            if not ok:
                wrong.append(key)
        outcome = right / len(fields)
        penalty = format_penalty(outcome, kept=not stringly)  # a right number given as a string
        error = f"wrong or missing: {', '.join(wrong)}" if wrong else ""
        if stringly:
            error = (error + "; " if error else "") + "a number was given as a string"
        return Score(
            clip_reward(outcome + penalty), "pass" if not wrong else "fail", outcome=outcome,
            penalty=penalty, tests_passed=right, tests_total=len(fields), error=error,
        )  # fmt: skip
