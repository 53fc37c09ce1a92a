"""Data transformation: write `transform(text: str) -> str` that turns CSV / JSON input
into an exactly specified output, checked on hidden inputs in the sandbox.

Tasks come from parameterised families (column names, column order, selections,
thresholds, group values and rows drawn from a seed), three per level:
  1  one reshaping: CSV -> JSON Lines with typed fields, JSON Lines -> CSV with chosen
     columns, rename a column and upper-case another;
  2  a reshaping plus filter and sort, a JSON array to sorted CSV, date reformatting;
  3  aggregation: group-by sums of a product, per-group count/total/mean as one JSON
     object, per-month totals over a status filter.
Each family's reference is real Python source (constants `P` + a fixed body); the
generator runs it here, on our own code, to compute expected outputs, and stores it in
the verifier data (never in the prompt) so tests and SFT can use it. The prompt shows
one example input and its exact output; the hidden tests are other inputs of the same
shape. Output formats are pinned in words (json.dumps defaults, `\\n` line ends, no
quoting) because the comparison is exact.

Verification reuses the code extraction (environments/parsing/code.py) and the shared harness
(environments/harness.py: only the hidden inputs go into the sandbox, outputs are compared
on the host; `flywheel.environments.audit` zeroes tampering as `suspected_hack`) in its `text`
mode: the function takes one string and must return a `str` (exactly, so a str subclass
with a lying __eq__ fails); outputs are compared after removing trailing newlines only. Reward = outcome = fraction of hidden tests passed.
penalty = -0.1 when the code was found outside the asked-for ```python block and earned
something (as in the math domain: charged only on credit, never below no answer;
environments/scoring.py holds the penalty and the ladder of verdicts).
Verdicts: pass, fail, timeout, error (sandbox broke), no_code (no code in the reply).
What it does not do: accept outputs that differ only in whitespace inside lines or in
key order.
"""

from __future__ import annotations

import json
import random
import re

from flywheel.environments.audit import audit_python
from flywheel.environments.base import Draft, GeneratedTasks, SandboxEnvironment, Score, reply
from flywheel.environments.harness import harness_job, read_report
from flywheel.environments.parsing.code import CODE_BLOCK, extract_code
from flywheel.environments.sandbox import ExecResult
from flywheel.environments.scoring import format_penalty, graded_run

N_HIDDEN = 6
ENTRY = "transform"

SYNONYMS = {
    "id": ["id", "order_id", "ref", "ticket"], "name": ["name", "customer", "client", "owner"],
    "group": ["region", "city", "team", "category"], "qty": ["qty", "units", "count", "quantity"],
    "amount": ["amount", "price", "cost", "value"], "date": ["date", "day", "created", "booked"],
    "status": ["status", "state", "stage"],
}  # fmt: skip
GROUPS = ["north", "south", "east", "west", "oslo", "lima", "pune", "kyiv", "alpha", "beta", "gamma", "delta"]
PEOPLE = ["ana", "ben", "chen", "dara", "eli", "femi", "gus", "hana", "ivo", "juno", "kai", "lena"]
STATUSES = ["paid", "pending", "void", "refunded"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


class Table:
    """A task's data shape: its column names, order and value pools. Inputs are drawn
    from it, so the example and the hidden tests share one shape."""

    def __init__(self, rng: random.Random, roles: list[str], rows: tuple[int, int] = (4, 8)):
        self.n_rows = rows
        self.col = {role: rng.choice(SYNONYMS[role]) for role in roles}
        self.order = rng.sample(roles, len(roles))
        self.groups = rng.sample(GROUPS, rng.randint(3, 4))
        self.year = rng.randint(2019, 2025)

    def rows(self, r: random.Random) -> list[dict]:
        ids = r.sample(range(100, 1000), r.randint(*self.n_rows))
        out = []
        for i in ids:
            month, day = r.randint(1, 12), r.randint(1, 28)
            row = {"id": i, "name": r.choice(PEOPLE), "group": r.choice(self.groups), "qty": r.randint(1, 20),
                   "amount": r.randint(1, 500), "date": f"{self.year + r.randint(0, 1)}-{month:02d}-{day:02d}",
                   "status": r.choices(STATUSES, weights=[5, 2, 2, 1])[0]}  # fmt: skip
            out.append({self.col[k]: row[k] for k in self.order})
        return out

    def csv(self, rows) -> str:
        names = [self.col[k] for k in self.order]
        return "\n".join([",".join(names)] + [",".join(str(row[n]) for n in names) for row in rows]) + "\n"

    def jsonl(self, rows) -> str:
        return "".join(json.dumps(row) + "\n" for row in rows)

    def names(self, roles) -> str:
        return ", ".join(f"`{self.col[r]}`" for r in roles)


CSV_NOTE = "The input is CSV with a header line; values never contain commas or quotes."
OUT_CSV = "Write CSV lines joined with \\n (not \\r\\n), header first, values unquoted, ending with a newline."
OUT_JSONL = "Write one json.dumps(obj) line per record (default separators), each ending with a newline."


# Each family: rng -> (content key, table, input kind, description, P, body).
# Bodies see the standard imports and `P`, the task's constants.
def csv_to_jsonl(rng):
    t = Table(rng, ["id", "name", "group", "qty", "amount"])
    keys = rng.sample(t.order, rng.randint(2, 4))
    cols = [t.col[k] for k in keys]
    ints = [t.col[k] for k in keys if k in ("id", "qty", "amount")]
    desc = (f"{CSV_NOTE} Convert it to JSON Lines: one object per data row, in input order, with exactly "
            f"the keys {t.names(keys)} in that order; {', '.join(ints) or 'no field'} as integers, the rest as strings. {OUT_JSONL}")  # fmt: skip
    body = """
def transform(text):
    rows = csv.DictReader(io.StringIO(text))
    return "".join(json.dumps({k: int(r[k]) if k in P["ints"] else r[k] for k in P["cols"]}) + "\\n" for r in rows)
"""
    return f"c2j{cols}{ints}", t, "csv", desc, {"cols": cols, "ints": ints}, body


def jsonl_to_csv(rng):
    t = Table(rng, ["id", "name", "group", "amount", "date"])
    cols = [t.col[k] for k in rng.sample(t.order, rng.randint(2, 4))]
    desc = (f"The input is JSON Lines, one object per line. Convert it to CSV with the columns "
            f"{', '.join(f'`{c}`' for c in cols)} in that order, rows in input order. {OUT_CSV}")  # fmt: skip
    body = """
def transform(text):
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return "\\n".join([",".join(P["cols"])] + [",".join(str(r[c]) for c in P["cols"]) for r in rows]) + "\\n"
"""
    return f"j2c{cols}", t, "jsonl", desc, {"cols": cols}, body


def rename_upper(rng):
    t = Table(rng, ["id", "name", "group", "qty"])
    old, up = t.col[rng.choice(t.order)], t.col[rng.choice(["name", "group"])]
    new = rng.choice(["label", "key", "who", "where", "tag", "field"])
    desc = (f"{CSV_NOTE} Rename the column `{old}` to `{new}` in the header and upper-case every value "
            f"in the column `{up}`; keep all columns and rows in order. {OUT_CSV}")  # fmt: skip
    body = """
def transform(text):
    lines = [line for line in text.splitlines() if line]
    header = lines[0].split(",")
    idx = header.index(P["upper"])
    out = [",".join(P["new"] if h == P["old"] else h for h in header)]
    for line in lines[1:]:
        vals = line.split(",")
        vals[idx] = vals[idx].upper()
        out.append(",".join(vals))
    return "\\n".join(out) + "\\n"
"""
    return f"ren{old},{new},{up}", t, "csv", desc, {"old": old, "new": new, "upper": up}, body


def filter_sort(rng):
    t = Table(rng, ["id", "name", "qty", "amount", "status"])
    num = t.col[rng.choice(["qty", "amount"])]
    threshold = rng.randint(3, 12) if num == t.col["qty"] else rng.randint(50, 300)
    key, desc_order = t.col[rng.choice(["qty", "amount", "name"])], rng.random() < 0.5
    keys = [t.col["id"]] + [t.col[k] for k in rng.sample(["name", "qty", "amount", "status"], 2)]
    ints = [c for c in keys if c in (t.col["id"], t.col["qty"], t.col["amount"])]
    desc = (f"{CSV_NOTE} Keep the rows whose `{num}` is at least {threshold}, sort them by `{key}` "
            f"({'descending' if desc_order else 'ascending'}{', compared as integers' if key != t.col['name'] else ''}), "
            f"breaking ties by `{t.col['id']}` ascending, and write them as JSON Lines with exactly the keys "
            f"{', '.join(f'`{c}`' for c in keys)} in that order; {', '.join(ints)} as integers, the rest as strings. {OUT_JSONL}")  # fmt: skip
    body = """
def transform(text):
    rows = [r for r in csv.DictReader(io.StringIO(text)) if int(r[P["num"]]) >= P["threshold"]]
    conv = (lambda v: v) if P["key_is_text"] else int
    rows.sort(key=lambda r: int(r[P["id"]]))
    rows.sort(key=lambda r: conv(r[P["key"]]), reverse=P["desc"])
    return "".join(json.dumps({k: int(r[k]) if k in P["ints"] else r[k] for k in P["keys"]}) + "\\n" for r in rows)
"""
    p = {"num": num, "threshold": threshold, "key": key, "key_is_text": key == t.col["name"], "desc": desc_order,
         "id": t.col["id"], "keys": keys, "ints": ints}  # fmt: skip
    return f"fs{num},{threshold},{key},{desc_order},{keys}", t, "csv", desc, p, body


def array_to_csv(rng):
    t = Table(rng, ["id", "name", "group", "amount"])
    cols = [t.col[k] for k in rng.sample(t.order, rng.randint(2, 4))]
    desc = (f"The input is a JSON array of objects. Write CSV with the columns {', '.join(f'`{c}`' for c in cols)} "
            f"in that order, rows sorted by `{t.col['group']}` (ascending), then by `{t.col['amount']}` "
            f"(descending), then by `{t.col['id']}` (ascending). {OUT_CSV}")  # fmt: skip
    body = """
def transform(text):
    rows = sorted(json.loads(text), key=lambda r: (r[P["group"]], -r[P["amount"]], r[P["id"]]))
    return "\\n".join([",".join(P["cols"])] + [",".join(str(r[c]) for c in P["cols"]) for r in rows]) + "\\n"
"""
    p = {"cols": cols, "group": t.col["group"], "amount": t.col["amount"], "id": t.col["id"]}
    return f"a2c{cols}", t, "array", desc, p, body


def reformat_dates(rng):
    t = Table(rng, ["id", "name", "date"])
    fmt = rng.choice(["DD/MM/YYYY", "MM/DD/YYYY", "D Mon YYYY", "YYYYMMDD"])
    how = {"D Mon YYYY": "day without a leading zero, English three-letter month, e.g. 5 Mar 2024"}.get(fmt, "zero-padded")
    desc = (f"{CSV_NOTE} Its `{t.col['date']}` column holds dates as YYYY-MM-DD. Rewrite every date as "
            f"{fmt} ({how}) and sort the rows by date, oldest first; rows with the same date keep their input "
            f"order. Keep all columns in order. {OUT_CSV}")  # fmt: skip
    body = """
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

def transform(text):
    lines = [line for line in text.splitlines() if line]
    header = lines[0].split(",")
    idx = header.index(P["date"])
    rows = sorted((line.split(",") for line in lines[1:]), key=lambda v: v[idx])
    for v in rows:
        y, m, d = v[idx].split("-")
        v[idx] = {"DD/MM/YYYY": f"{d}/{m}/{y}", "MM/DD/YYYY": f"{m}/{d}/{y}", "YYYYMMDD": y + m + d,
                  "D Mon YYYY": f"{int(d)} {MONTHS[int(m) - 1]} {y}"}[P["fmt"]]
    return "\\n".join([",".join(header)] + [",".join(v) for v in rows]) + "\\n"
"""
    return f"dates{fmt}", t, "csv", desc, {"date": t.col["date"], "fmt": fmt}, body


def group_sum(rng):
    t = Table(rng, ["id", "group", "qty", "amount", "status"], rows=(6, 10))
    only = rng.choice([None, "paid"])
    out = rng.choice(["total", "revenue", "sum"])
    g, q, a = t.col["group"], t.col["qty"], t.col["amount"]
    where = f" Use only rows whose `{t.col['status']}` is `paid`." if only else ""
    desc = (f"{CSV_NOTE} For each `{g}`, add up `{q}` times `{a}` over its rows.{where} Write CSV with the header "
            f"`{g},{out}` and one row per {g} that has rows, sorted by {out} (descending), ties by {g} (ascending). {OUT_CSV}")  # fmt: skip
    body = """
def transform(text):
    totals = {}
    for r in csv.DictReader(io.StringIO(text)):
        if P["only"] is None or r[P["status"]] == P["only"]:
            totals[r[P["g"]]] = totals.get(r[P["g"]], 0) + int(r[P["q"]]) * int(r[P["a"]])
    rows = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    return "\\n".join([P["g"] + "," + P["out"]] + [f"{k},{v}" for k, v in rows]) + "\\n"
"""
    p = {"only": only, "status": t.col["status"], "g": g, "q": q, "a": a, "out": out}
    return f"gsum{only},{out},{g},{q},{a}", t, "csv", desc, p, body


def group_stats(rng):
    t = Table(rng, ["id", "group", "amount"], rows=(6, 10))
    g, a = t.col["group"], t.col["amount"]
    desc = (f"The input is JSON Lines, one object per line. Group the records by `{g}`; for each group compute "
            f'"count" (records), "total" (sum of `{a}`) and "mean" (total / count, rounded with Python\'s round(x, 2)). '
            f"Output one line: json.dumps of an object mapping each {g} to {{\"count\": ..., \"total\": ..., \"mean\": ...}}, "
            "with sort_keys=True and default separators, ending with a newline.")  # fmt: skip
    body = """
def transform(text):
    groups = {}
    for line in text.splitlines():
        if line.strip():
            r = json.loads(line)
            groups.setdefault(r[P["g"]], []).append(r[P["a"]])
    out = {k: {"count": len(v), "total": sum(v), "mean": round(sum(v) / len(v), 2)} for k, v in groups.items()}
    return json.dumps(out, sort_keys=True) + "\\n"
"""
    return f"gstats{g},{a}", t, "jsonl", desc, {"g": g, "a": a}, body


def monthly(rng):
    t = Table(rng, ["id", "date", "amount", "status"], rows=(6, 10))
    keep = sorted(rng.sample(STATUSES, 2))
    d, a, s = t.col["date"], t.col["amount"], t.col["status"]
    desc = (f"{CSV_NOTE} `{d}` holds dates as YYYY-MM-DD. Keep rows whose `{s}` is `{keep[0]}` or `{keep[1]}`, "
            f"then for each month (YYYY-MM) that has kept rows output the number of rows and the sum of `{a}`. "
            f"Write CSV with the header `month,rows,{a}`, one row per month, oldest month first. {OUT_CSV}")  # fmt: skip
    body = """
def transform(text):
    months = {}
    for r in csv.DictReader(io.StringIO(text)):
        if r[P["s"]] in P["keep"]:
            n, total = months.get(r[P["d"]][:7], (0, 0))
            months[r[P["d"]][:7]] = (n + 1, total + int(r[P["a"]]))
    lines = [f"{m},{n},{total}" for m, (n, total) in sorted(months.items())]
    return "\\n".join(["month,rows," + P["a"]] + lines) + "\\n"
"""
    return f"monthly{keep},{d},{a},{s}", t, "csv", desc, {"keep": keep, "d": d, "a": a, "s": s}, body


FAMILIES = {
    1: [csv_to_jsonl, jsonl_to_csv, rename_upper],
    2: [filter_sort, array_to_csv, reformat_dates],
    3: [group_sum, group_stats, monthly],
}


def reference_source(p: dict, body: str) -> str:
    return f"import csv\nimport io\nimport json\n\nP = {p!r}\n{body}"


def run_reference(source: str, text: str) -> str:
    ns: dict = {}
    exec(compile(source, "<reference>", "exec"), ns)  # our own generated code, never a model's  # noqa: S102
    return ns[ENTRY](text)


BARE_START = re.compile(rf"^(?:import |from \S+ import |def {ENTRY}\b)", re.MULTILINE)


def find_code(completion: str) -> tuple[str | None, bool]:
    """(code, fenced). Fenced blocks are read as the code domain reads them. Bare code runs
    from its first import or `def transform` line to the end (not from the def, as in
    the code domain, since a transform usually needs its imports)."""
    if any(block.strip() for block in CODE_BLOCK.findall(completion)):
        return extract_code(completion, ENTRY), True
    m = BARE_START.search(completion)
    return (completion[m.start() :], False) if m and f"def {ENTRY}" in completion[m.start() :] else (None, False)


class DataTransform(GeneratedTasks, SandboxEnvironment):
    name = "data"
    version = "1"
    levels = (1, 2, 3)

    def generate(self, level, rng):
        family = rng.choice(FAMILIES[level])
        key, table, kind, desc, params, body = family(rng)
        source = reference_source(params, body)
        fmt = {"csv": table.csv, "jsonl": table.jsonl, "array": lambda rows: json.dumps(rows, indent=2) + "\n"}[kind]
        inputs, seen = [], set()
        for _ in range(100):  # distinct inputs: the example first, hidden tests after
            text = fmt(table.rows(rng))
            if text not in seen:
                seen.add(text)
                inputs.append(text)
            if len(inputs) == 1 + N_HIDDEN:
                break
        cases = [[text, run_reference(source, text)] for text in inputs]
        (ex_in, ex_out), hidden = cases[0], cases[1:]
        user = (
            f"Write a Python function `transform(text: str) -> str` (standard library only) that does this:\n\n"
            f"{desc}\n\nExample input:\n```\n{ex_in}```\n\nExpected output for that input:\n```\n{ex_out}```\n\n"
            "Your function will be run on other inputs of the same shape and its output compared exactly. "
            "Reply with the complete function in one ```python code block."
        )
        prompt = [
            {"role": "system", "content": "You are a careful Python programmer."},
            {"role": "user", "content": user},
        ]
        shape = [table.col[r] for r in table.order]  # the same transformation on other columns is another task
        return Draft(
            f"{family.__name__}:{key}:{shape}", prompt, setup={"entry": ENTRY, "tools": []},
            verifier={"entry": ENTRY, "tests": hidden, "reference": source},
        )

    def reference(self, task):
        return reply(f"```python\n{json.loads(task.verifier_json)['reference']}```")

    def job(self, task, completion):
        tests = json.loads(task.verifier_json)["tests"]
        code, fenced = find_code(completion)
        if code is None:
            return Score(0.0, "no_code", tests_total=len(tests), error="no code in completion")
        return harness_job(code, ENTRY, [text for text, _ in tests], call="text", test_timeout_s=2, fenced=fenced)

    def score(self, task, job, result: ExecResult):
        tests = json.loads(task.verifier_json)["tests"]
        total = len(tests)
        outputs, res, problem = read_report(job, result)
        findings = audit_python(job.files["solution.py"])
        if problem == "forged":
            findings.append("a forged or malformed result line")
        passed = sum(
            isinstance(got, str) and got.rstrip("\n") == want.rstrip("\n") for got, (_, want) in zip(outputs, tests)
        )
        first_error = res.get("error", "")
        if not first_error and passed < total:
            wrong = next((g for g, (_, w) in zip(outputs, tests) if g is None or g.rstrip("\n") != w.rstrip("\n")), None)
            first_error = f"wrong output: {wrong!r}"[:300]
        penalty = format_penalty(passed / max(1, total), kept=json.loads(job.stdin)["fenced"])
        error = first_error + ("; code was not in a ```python block" if penalty else "")
        return graded_run(result, res, problem, findings, passed, total, penalty=penalty, error=error.lstrip("; "))
