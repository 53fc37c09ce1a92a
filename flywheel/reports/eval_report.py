"""What an evaluation reports, every number with its interval.

From the lake's evaluation views (storage/evals.py):
- `cells`: per (domain, level) n, greedy pass@1 with its 95% Wilson interval, pass@k when
  sampled, mean reward, turns, tokens per solved task, tool-call validity;
- `groups`: the same pooled over a group of domains ("held-out": the domains trained on,
  their eval split; each suite, e.g. "humaneval", on its own);
- `compare`: two policy versions (of one run or two) on the same tasks: the paired
  difference of pass@1 with a bootstrap interval, per group, saying "no resolvable
  difference" when the interval spans 0;
- `markdown` and `model_card`: the tables as text, with the agentic metrics of episode
  domains (flywheel/reports/agentic_report.py) when there are any.
"""

from __future__ import annotations

from flywheel.reports.stats import Paired, paired, wilson
from flywheel.storage.agentic import FAILURES

CELL_SQL = """
SELECT domain, level, tasks, solved, mean_reward, mean_turns, tokens_per_solved, tool_call_validity
FROM eval_cells WHERE policy_version = ? AND mode = ? ORDER BY domain, level
"""


def cells(con, version: int, k: int = 0) -> list[dict]:
    """Per (domain, level) of `version`'s greedy evaluation (and pass@k from its sampled one)."""
    sampled = {}
    if k:
        sampled = {(d, lvl): (s, n) for d, lvl, n, s, *_ in con.execute(CELL_SQL, [version, "sampled"]).fetchall()}
    out = []
    for d, lvl, n, s, reward, turns, tokens, validity in con.execute(CELL_SQL, [version, "greedy"]).fetchall():
        lo, hi = wilson(s, n)
        row = {"domain": d, "level": lvl, "n": n, "solved": s, "pass@1": round(s / n, 4), "ci_low": round(lo, 4),
               "ci_high": round(hi, 4)}  # fmt: skip
        if k and (d, lvl) in sampled:
            row[f"pass@{k} (sampled)"] = round(sampled[(d, lvl)][0] / sampled[(d, lvl)][1], 4)
        row.update(mean_reward=round(reward, 4), mean_turns=round(turns, 2),
                   tokens_per_solved=None if tokens is None else round(tokens, 1),
                   tool_call_validity=None if validity is None else round(validity, 4))  # fmt: skip
        out.append(row)
    return out


def groups(cell_rows: list[dict], by_group: dict[str, list[str]]) -> list[dict]:
    """Pass@1 pooled over each group's domains (every task weighs the same)."""
    out = []
    for name, domains in by_group.items():
        mine = [c for c in cell_rows if c["domain"] in domains]
        if not mine:
            continue
        n = sum(c["n"] for c in mine)
        solved = sum(c["solved"] for c in mine)
        lo, hi = wilson(solved, n)
        out.append({"group": name, "n": n, "solved": solved, "pass@1": round(solved / n, 4),
                    "ci_low": round(lo, 4), "ci_high": round(hi, 4)})  # fmt: skip
    return out


def task_scores(con, version: int) -> dict[str, tuple[str, int, int]]:
    """task_id -> (domain, level, solved) of `version`'s greedy evaluation."""
    rows = con.execute(
        "SELECT task_id, domain, level, solved FROM eval_tasks WHERE policy_version = ? AND mode = 'greedy'", [version]
    ).fetchall()
    return {t: (d, lvl, s) for t, d, lvl, s in rows}


def compare(con_a, version_a: int, con_b, version_b: int, by_group: dict[str, list[str]]) -> list[tuple[str, Paired]]:
    """b - a per group, paired over the tasks both evaluated, stratified by cell."""
    a, b = task_scores(con_a, version_a), task_scores(con_b, version_b)
    out = []
    for name, domains in by_group.items():
        ids = [t for t in a if t in b and a[t][0] in domains]
        if ids:
            cells_of = {t: a[t][:2] for t in ids}
            out.append((name, paired({t: a[t][2] for t in ids}, {t: b[t][2] for t in ids}, cells_of)))
    return out


def _table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["(no rows)"]
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join("" if r.get(h) is None else str(r.get(h)) for h in header) + " |" for r in rows]


def markdown(title: str, cell_rows: list[dict], group_rows: list[dict], comparisons=(), wall_s: float | None = None,
             agentic: list[dict] = ()) -> str:  # fmt: skip
    lines = [f"# {title}", "", "Greedy pass@1 with 95% Wilson intervals; n = tasks.", ""]
    lines += _table(group_rows) + [""] + _table(cell_rows)
    if agentic:  # episodes of multi-turn domains (flywheel/reports/agentic_report.py)
        keys = [n for n in agentic[0] if n in ("mode", "domain", "level")]
        lines += ["", "Agentic metrics (episodes; completion with its 95% Wilson interval; pass^k: all k pass):", ""]
        lines += _table([{n: v for n, v in r.items() if n not in FAILURES} for r in agentic])
        lines += ["", "Why episodes failed:", ""]
        lines += _table([{**{k: r[k] for k in keys}, "failed": r["episodes"] - r["completed"],
                          **{f: r[f] for f in FAILURES}} for r in agentic])  # fmt: skip
    if comparisons:
        lines += ["", "Paired differences (same tasks; bootstrap 95% interval):", ""]
        lines += [f"- {name}: {p.describe()}" for name, p in comparisons]
    if wall_s is not None:
        lines += ["", f"Evaluation wall time: {wall_s:.0f} s."]
    return "\n".join(lines) + "\n"


def model_card(run_id: str, version: int, base_model: str, body: str) -> str:
    return (
        f"---\nlibrary_name: transformers\nbase_model: {base_model}\ntags: [flywheel, grpo, rl]\n---\n\n"
        f"# {run_id}, policy v{version}\n\nTrained by flywheel (RL post-training with verifiable rewards) "
        f"from `{base_model}`. Load it with transformers or serve it with vLLM "
        f"(`vllm serve <this dir>`).\n\n{body}"
    )
