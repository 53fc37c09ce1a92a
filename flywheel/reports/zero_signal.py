"""Zero signal, said plainly: a domain (a task file is one) whose cycle gave GRPO nothing to learn.

GRPO learns only from groups whose rewards differ (policy/grpo.py drops the others). When
every sample of a domain scored 0, or every one scored 1, or most of its groups scored
alike, the cycle's update spends time and teaches nothing, and a summary's mean reward
does not say so. `notes(rows)` turns the lake's `signal` view (storage/query.py) into one
line per domain: what happened, in which cycles, the likely cause read from the failed
samples themselves (no answer in the verifier's format, cut at max_tokens, else too hard
or too strict a verifier) and what to try. The console prints them after each cycle
(flows/flywheel.py) and `flywheel report` after its table.

What it does not do: change the run. The curriculum (tasks/curriculum.py) already moves
levels by pass rate; these are for the person reading the run.
"""

from __future__ import annotations

MOSTLY = 0.5  # a domain's cycle is reported when at least this share of its groups are flat
EVIDENCE = 0.5  # a cause is named when at least this share of the failed samples show it

SIGNAL_SQL = """
SELECT cycle, domain, samples, groups, flat_groups, all_zero_groups, all_one_groups, min_reward, max_reward,
       pass_rate, no_answer, truncated
FROM signal WHERE split = 'train' {where} ORDER BY domain, cycle
"""

TRY_HARDER = (
    "try: lower levels (sampler.levels), a larger group (generation.k) or a higher temperature "
    "(generation.temperature) so that some sample of a group passes, or an SFT cold start on the "
    "domain's reference replies (cold_start.references)"
)
TRY_EASIER = (
    "try: higher levels (sampler.levels; the curriculum opens the next level as pass rates rise), "
    "fewer tasks of this domain, or a stricter verifier (one that passes any answer passes everything)"
)


def signal_rows(con, cycle: int | None = None) -> list[dict]:
    """The train split's rows of the `signal` view, of one cycle or all."""
    cur = con.execute(SIGNAL_SQL.format(where="AND cycle = ?" if cycle is not None else ""),
                      [cycle] if cycle is not None else [])  # fmt: skip
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _cycles(cycles: list[int]) -> str:
    """[0, 1, 2, 5] -> 'cycles 0-2, 5'."""
    runs: list[list[int]] = []
    for c in sorted(cycles):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return ("cycles " if len(cycles) > 1 else "cycle ") + text


def _kind(row: dict) -> str | None:
    """all_zero / all_one / flat_fail / flat_pass, or None when the cycle had signal."""
    if row["max_reward"] is not None and row["max_reward"] <= 0:
        return "all_zero"
    if row["min_reward"] is not None and row["min_reward"] >= 1:
        return "all_one"
    if row["groups"] and row["flat_groups"] / row["groups"] >= MOSTLY:
        return "flat_fail" if row["all_zero_groups"] >= row["all_one_groups"] else "flat_pass"
    return None


def _fail_cause(rows: list[dict]) -> str:
    """The likely cause of failing groups, from the failed samples' own evidence."""
    weight = sum(r["samples"] for r in rows) or 1
    no_answer = sum(r["no_answer"] * r["samples"] for r in rows) / weight
    truncated = sum(r["truncated"] * r["samples"] for r in rows) / weight
    if no_answer >= EVIDENCE:
        return (f"likely the answer format: {no_answer:.0%} of the failed samples had no answer the verifier "
                "could read (check the prompt's instructions and the chat template)")  # fmt: skip
    if truncated >= EVIDENCE:
        return (f"likely the length: {truncated:.0%} of the failed samples were cut at generation.max_tokens "
                "(raise it)")  # fmt: skip
    return ("likely too hard for the model at these levels, or a verifier stricter than the task asks "
            "(read a few completions: flywheel query \"SELECT messages, verdict, error FROM trajectories ...\")")  # fmt: skip


def notes(rows: list[dict]) -> list[str]:
    """One line per domain and kind of missing signal over `rows` (signal_rows)."""
    found: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        kind = _kind(row)
        if kind:
            found.setdefault((row["domain"], kind), []).append(row)
    out = []
    for (domain, kind), hit in sorted(found.items()):
        when = _cycles([r["cycle"] for r in hit])
        samples = sum(r["samples"] for r in hit)
        groups, flat = sum(r["groups"] for r in hit), sum(r["flat_groups"] for r in hit)
        zero, one = sum(r["all_zero_groups"] for r in hit), sum(r["all_one_groups"] for r in hit)
        if kind == "all_zero":
            what = f"every sample scored 0 in {when} ({samples} samples)"
        elif kind == "all_one":
            what = f"every sample scored 1 in {when} ({samples} samples)"
        else:
            what = (f"{flat} of {groups} groups had equal rewards in {when} ({zero} all failed, "
                    f"{one} all passed, {flat - zero - one} tied between)")  # fmt: skip
        if kind in ("all_zero", "flat_fail"):
            why, advice = _fail_cause(hit), TRY_HARDER
        else:
            why, advice = "too easy for the model at these levels", TRY_EASIER
        out.append(f"no GRPO signal from {domain}: {what}; {why}; {advice}.")
    return out
