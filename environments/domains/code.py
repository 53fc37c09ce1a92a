"""Python function synthesis: write a function from a signature, docstring and examples.

Tasks come from parameterised families (constants, names and inputs drawn from a seed),
three per level: level 1 is one expression, level 2 a loop or comprehension with a
condition, level 3 a small algorithm. Hidden tests are inputs disjoint from the examples
shown in the prompt; their expected outputs come from the family's reference function.

Verification runs `solution.py` under a harness in the sandbox. Only the hidden tests'
*inputs* reach the harness (on stdin; never as files); it sends back what the solution
returned as canonical JSON, on a line tagged with a per-run nonce, and the host compares
that with the expected outputs, which never enter the sandbox. So `True != 1`, objects
that claim equality to everything do not serialise, and a solution that patches the
harness, forges a result line or leaves early gains nothing. On top, `flywheel.environments.audit`
zeroes the reward of a solution that tries (verdict `suspected_hack`).
Reward = fraction of hidden tests passed.
"""

from __future__ import annotations

import json
import random

from flywheel.environments.audit import audit_python
from flywheel.environments.base import Draft, GeneratedTasks, SandboxEnvironment, Score, reply
from flywheel.environments.harness import harness_job, read_report
from flywheel.environments.parsing.code import extract_code
from flywheel.environments.sandbox import ExecResult
from flywheel.environments.scoring import graded_run

VERBS = ["compute", "get", "make", "find", "calc", "build", "derive", "produce"]
NOUNS = ["value", "result", "score", "total", "output", "answer", "item", "metric"]
WORDS = ["fizz", "buzz", "ping", "pong", "zap", "bop", "tick", "tock", "foo", "bar"]


def _name(rng: random.Random, hint: str) -> str:
    return f"{rng.choice(VERBS)}_{hint}_{rng.choice(NOUNS)}"


def _ints(rng, n_lo=3, n_hi=8, lo=-20, hi=20):
    return [rng.randint(lo, hi) for _ in range(rng.randint(n_lo, n_hi))]


def _word(rng, alphabet="abcde", lo=3, hi=10):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


# Each family: rng -> (content key, signature, docstring, reference fn, input generator,
# the reference's body as source: the SFT reference reply; tests check it agrees with fn)
def affine(rng):
    a, b = rng.randint(2, 9), rng.randint(-10, 10)
    doc = f"Return {a} times x plus {b}."
    return f"affine{a},{b}", "x: int", doc, lambda x: a * x + b, lambda r: (r.randint(-50, 50),), f"return {a} * x + {b}"


def count_char(rng):
    c = rng.choice("abcde")
    doc = f"Return how many times the letter {c!r} occurs in s."
    return f"count{c}", "s: str", doc, lambda s: s.count(c), lambda r: (_word(r),), f"return s.count({c!r})"


def join_words(rng):
    sep = rng.choice(["-", "+", "::", ", ", "|", "_"])
    doc = f"Join the strings in words with {sep!r} between them."
    return f"join{sep}", "words: list[str]", doc, lambda w: sep.join(w), lambda r: (
        [_word(r, "xyzw", 1, 4) for _ in range(r.randint(1, 5))],
    ), f"return {sep!r}.join(words)"


def sum_multiples(rng):
    k = rng.randint(2, 7)
    doc = f"Return the sum of the numbers in nums that are divisible by {k}."
    return f"summult{k}", "nums: list[int]", doc, lambda xs: sum(x for x in xs if x % k == 0), lambda r: (
        _ints(r),
    ), f"return sum(x for x in nums if x % {k} == 0)"


def clamp_all(rng):
    lo = rng.randint(-10, 0)
    hi = lo + rng.randint(3, 15)
    doc = f"Return a new list where each number in nums is clamped to the range [{lo}, {hi}]."
    return f"clamp{lo},{hi}", "nums: list[int]", doc, lambda xs: [min(max(x, lo), hi) for x in xs], lambda r: (
        _ints(r),
    ), f"return [min(max(x, {lo}), {hi}) for x in nums]"


def shift_letters(rng):
    k = rng.randint(1, 25)
    doc = f"Shift every lowercase letter in s forward by {k} in the alphabet, wrapping from z to a; keep other characters."

    def ref(s):
        return "".join(chr((ord(ch) - 97 + k) % 26 + 97) if "a" <= ch <= "z" else ch for ch in s)

    body = f"return ''.join(chr((ord(ch) - 97 + {k}) % 26 + 97) if 'a' <= ch <= 'z' else ch for ch in s)"
    return f"shift{k}", "s: str", doc, ref, lambda r: (_word(r, "abcxyz -", 2, 10),), body


def run_length(rng):
    sep = rng.choice(["", ":", "*"])
    doc = (
        f"Run-length encode s: each run of a repeated character becomes the character, then "
        f"{sep!r}, then the run length, all joined into one string. Example: 'aab' -> 'a{sep}2b{sep}1'."
    )

    def ref(s):
        out, i = [], 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out.append(f"{s[i]}{sep}{j - i}")
            i = j
        return "".join(out)

    body = (f"out, i = [], 0\nwhile i < len(s):\n    j = i\n    while j < len(s) and s[j] == s[i]:\n        j += 1\n"
            f"    out.append(s[i] + {sep!r} + str(j - i))\n    i = j\nreturn ''.join(out)")
    return f"rle{sep}", "s: str", doc, ref, lambda r: (_word(r, "aab", 0, 9),), body


def kth_distinct(rng):
    k = rng.randint(1, 3)
    doc = f"Return the {k}-th smallest distinct number in nums (1-based), or -1 if there are fewer than {k} distinct numbers."

    def ref(xs):
        d = sorted(set(xs))
        return d[k - 1] if len(d) >= k else -1

    body = f"distinct = sorted(set(nums))\nreturn distinct[{k - 1}] if len(distinct) >= {k} else -1"
    return f"kth{k}", "nums: list[int]", doc, ref, lambda r: (_ints(r, 0, 7, -5, 5),), body


def fizz_words(rng):
    a, b = rng.sample([2, 3, 4, 5, 7], 2)
    w1, w2 = rng.sample(WORDS, 2)
    doc = (
        f"Return a list for i from 1 to n: {w1 + w2!r} if i is divisible by both {a} and {b}, "
        f"{w1!r} if only by {a}, {w2!r} if only by {b}, else str(i)."
    )

    def ref(n):
        return [
            w1 + w2 if i % a == 0 and i % b == 0 else w1 if i % a == 0 else w2 if i % b == 0 else str(i)
            for i in range(1, n + 1)
        ]

    body = (f"out = []\nfor i in range(1, n + 1):\n    if i % {a} == 0 and i % {b} == 0:\n        out.append({w1 + w2!r})\n"
            f"    elif i % {a} == 0:\n        out.append({w1!r})\n    elif i % {b} == 0:\n        out.append({w2!r})\n"
            "    else:\n        out.append(str(i))\nreturn out")
    return f"fizz{a},{b},{w1},{w2}", "n: int", doc, ref, lambda r: (r.randint(0, 16),), body


FAMILIES = {
    1: [affine, count_char, join_words],
    2: [sum_multiples, clamp_all, shift_letters],
    3: [run_length, kth_distinct, fizz_words],
}
N_EXAMPLES, N_HIDDEN = 3, 8

class CodeSynthesis(GeneratedTasks, SandboxEnvironment):
    name = "code"
    version = "1"
    levels = (1, 2, 3)
    families = FAMILIES  # environments/domains/code_transfer.py: other families, the same tasks otherwise

    def generate(self, level, rng):
        family = rng.choice(self.families[level])
        key, params, doc, ref, make_input, *body = family(rng)
        entry = _name(rng, family.__name__.split("_")[0])
        inputs: list[tuple] = []
        seen: set[str] = set()
        for _ in range(200):  # distinct inputs; examples first, hidden tests after
            args = make_input(rng)
            sig = json.dumps(args)
            if sig not in seen:
                seen.add(sig)
                inputs.append(args)
            if len(inputs) == N_EXAMPLES + N_HIDDEN:
                break
        cases = [[list(a), ref(*a)] for a in inputs]
        examples, hidden = cases[:N_EXAMPLES], cases[N_EXAMPLES:]
        shown = "\n".join(f">>> {entry}({', '.join(map(repr, a))})\n{r!r}" for a, r in examples)
        user = (
            f"Write this Python function:\n\n```python\ndef {entry}({params}):\n"
            f'    """{doc}"""\n```\n\nExamples:\n{shown}\n\n'
            "Reply with the complete function in one ```python code block."
        )
        prompt = [
            {"role": "system", "content": "You are a careful Python programmer."},
            {"role": "user", "content": user},
        ]
        verifier = {"entry": entry, "tests": hidden}
        if body:  # the reference reply: the function written out
            lines = "\n".join("    " + ln for ln in body[0].splitlines())
            verifier["reference"] = f"def {entry}({params}):\n{lines}\n"
        return Draft(f"{family.__name__}:{key}:{entry}", prompt, setup={"entry": entry, "tools": []}, verifier=verifier)

    def reference(self, task):
        source = json.loads(task.verifier_json).get("reference")
        return reply(f"```python\n{source}```") if source else None

    def job(self, task, completion):
        verifier = json.loads(task.verifier_json)
        code = extract_code(completion, verifier["entry"])
        if code is None:
            return Score(0.0, "no_code", tests_total=len(verifier["tests"]), error="no code in completion")
        return harness_job(code, verifier["entry"], [args for args, _ in verifier["tests"]], call="args")

    def score(self, task, job, result: ExecResult):
        tests = json.loads(task.verifier_json)["tests"]
        findings = audit_python(job.files["solution.py"])
        outputs, res, problem = read_report(job, result)
        expected = [json.dumps(want, sort_keys=True) for _, want in tests]
        passed = sum(got == want for got, want in zip(outputs, expected))
        return graded_run(result, res, problem, findings, passed, len(tests))
