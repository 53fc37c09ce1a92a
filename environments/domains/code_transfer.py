"""`code_transfer`: function-writing tasks from families the `code` domain never trains on.

The same prompt format, hidden-test verifier and levels as environments/domains/code.py,
but nine other families (none of them is a variation of a `code` family: other
operations, other input shapes), and every task is held out: `make_tasks("train", ...)`
is empty and the lake would refuse one in training anyway. A policy trained on `code`
and evaluated here shows whether it learnt to write functions or learnt nine templates.
"""

from __future__ import annotations

from flywheel.environments.domains.code import CodeSynthesis, _ints, _word


def span(rng):
    doc = "Return the largest number in nums minus the smallest; 0 for an empty list."
    return "span", "nums: list[int]", doc, lambda xs: (max(xs) - min(xs)) if xs else 0, lambda r: (_ints(r, 0, 7),)


def count_above(rng):
    k = rng.randint(-5, 10)
    doc = f"Return how many numbers in nums are strictly greater than {k}."
    return f"above{k}", "nums: list[int]", doc, lambda xs: sum(x > k for x in xs), lambda r: (_ints(r),)


def ends_with(rng):
    c = rng.choice("xyz")
    doc = f"Return True if the string s ends with the letter {c!r}, else False."
    return f"ends{c}", "s: str", doc, lambda s: s.endswith(c), lambda r: (_word(r, "axyz", 0, 6),)


def running_total(rng):
    doc = "Return the running totals of nums: element i is the sum of nums[0] .. nums[i]."

    def ref(xs):
        out, t = [], 0
        for x in xs:
            t += x
            out.append(t)
        return out

    return "running", "nums: list[int]", doc, ref, lambda r: (_ints(r, 0, 7),)


def dedupe(rng):
    doc = "Return the numbers of nums without repeats, each kept where it first occurs."
    return "dedupe", "nums: list[int]", doc, lambda xs: list(dict.fromkeys(xs)), lambda r: (_ints(r, 0, 9, -3, 3),)


def vowel_swap(rng):
    v = rng.choice("aeiou")
    doc = f"Replace every vowel (a, e, i, o, u) in s with {v!r} and return the result."
    return f"vowel{v}", "s: str", doc, lambda s: "".join(v if ch in "aeiou" else ch for ch in s), lambda r: (
        _word(r, "abeiouxy", 0, 9),
    )


def longest_run(rng):
    doc = "Return the length of the longest run of equal consecutive characters in s; 0 for an empty s."

    def ref(s):
        best = cur = 0
        for i, ch in enumerate(s):
            cur = cur + 1 if i and s[i - 1] == ch else 1
            best = max(best, cur)
        return best

    return "longest", "s: str", doc, ref, lambda r: (_word(r, "aab", 0, 10),)


def second_largest(rng):
    doc = "Return the second largest distinct number in nums, or None if there is none."

    def ref(xs):
        d = sorted(set(xs))
        return d[-2] if len(d) >= 2 else None

    return "second", "nums: list[int]", doc, ref, lambda r: (_ints(r, 0, 7, -5, 5),)


def chunk_sums(rng):
    n = rng.randint(2, 4)
    doc = f"Split nums into consecutive chunks of {n} (the last may be shorter) and return the list of their sums."
    return f"chunks{n}", "nums: list[int]", doc, lambda xs: [sum(xs[i : i + n]) for i in range(0, len(xs), n)], lambda r: (
        _ints(r, 0, 9),
    )


FAMILIES = {
    1: [span, count_above, ends_with],
    2: [running_total, dedupe, vowel_swap],
    3: [longest_run, second_largest, chunk_sums],
}


class CodeTransfer(CodeSynthesis):
    name = "code_transfer"
    version = "1"
    eval_only = True
    families = FAMILIES
