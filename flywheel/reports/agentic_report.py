"""The agentic metrics of episodes as report rows: read from the views, never recomputed.

storage/agentic.py defines every metric (one SQL definition); this module only reads
`agentic_cells` and `agentic_pass_k` for the rows a report wants, puts the 95% Wilson
interval on the completion rate, and rounds. Its rows feed every place that shows them:
the evaluation (EvalResult.agentic, its DataFrame, the markdown report of
flywheel/reports/eval_report.py and the Prefect table artifact: flows/evaluate.py), the
tracker (flywheel/reports/tracking.py) and
`flywheel report` (flywheel/cli/query.py, over training cycles as well).

A row: the keys; episodes, tasks, completed, completion with ci_low/ci_high; pass@k and
pass^k for k = 1, 2, 4, ... and the largest n (samples per task; a greedy evaluation has
n = 1); turns and sampled tokens per solved episode; call validity (parses, names a tool,
valid) and accuracy; wall seconds per episode; the count of each failure.
The interval treats episodes as independent: with k samples per task it is narrower than
the task-level spread (samples of one task are correlated); the greedy row is exact.
"""

from __future__ import annotations

from flywheel.reports.stats import wilson
from flywheel.storage.agentic import FAILURES

METRICS = ("turns_per_solved", "tokens_per_solved", "call_parses", "call_names_tool", "call_valid",
           "call_accuracy", "wall_s_per_episode")  # fmt: skip


def shown_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n >= 1 else []


def _round(value, digits: int = 4):
    return None if value is None else round(float(value), digits)


def agentic_rows(con, keys: list[str], where: str = "TRUE", params: list | None = None) -> list[dict]:
    """One row per value of `keys` among the episodes `where` selects (SQL over the views'
    columns, with `params`), ordered by the keys; [] when there are no episodes."""
    cols = ", ".join(keys)
    params = params or []
    cells = con.execute(
        f"SELECT {cols}, episodes, tasks, completed, {', '.join(METRICS)}, {', '.join(FAILURES)} "
        f"FROM agentic_cells WHERE {where} ORDER BY {cols}",
        params,
    ).fetchall()
    pass_k: dict[tuple, dict[int, tuple[float, float]]] = {}
    for *key, k, at, hat in con.execute(
        f"SELECT {cols}, k, pass_at_k, pass_hat_k FROM agentic_pass_k WHERE {where} ORDER BY {cols}, k",
        params,
    ).fetchall():
        pass_k.setdefault(tuple(key), {})[k] = (at, hat)
    out = []
    for values in cells:
        key, (episodes, tasks, completed) = values[: len(keys)], values[len(keys) : len(keys) + 3]
        rest = values[len(keys) + 3 :]
        lo, hi = wilson(completed, episodes)
        row = dict(zip(keys, key))
        completion = _round(completed / episodes)
        row.update(episodes=episodes, tasks=tasks, completed=completed, completion=completion,
                   ci_low=_round(lo), ci_high=_round(hi))  # fmt: skip
        by_k = pass_k.get(tuple(key), {})
        ks = shown_ks(max(by_k, default=0))
        row.update({f"pass@{k}": _round(by_k[k][0]) for k in ks})
        row.update({f"pass^{k}": _round(by_k[k][1]) for k in ks})
        row.update({m: _round(v, 1 if m in ("turns_per_solved", "tokens_per_solved") else 4)
                    for m, v in zip(METRICS, rest[: len(METRICS)])})  # fmt: skip
        row.update(dict(zip(FAILURES, rest[len(METRICS) :])))
        out.append(row)
    return _same_columns(out)


def _same_columns(rows: list[dict]) -> list[dict]:
    """Every row with every column (the pass@k columns differ with n): the keys and the
    completion, then pass@k and pass^k by k, the other metrics, the failures."""
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    passes = sorted((n for n in names if n.startswith("pass")), key=lambda n: (n[4], int(n[5:])))
    rest = [n for n in names if n not in passes and n not in FAILURES]
    cut = rest.index("ci_high") + 1 if "ci_high" in rest else len(rest)
    order = rest[:cut] + passes + rest[cut:] + [n for n in names if n in FAILURES]
    return [{n: r.get(n) for n in order} for r in rows]


def evaluation_rows(con, version: int) -> list[dict]:
    """The agentic rows of `version`'s evaluation (an evals.connect connection), per mode,
    domain and level: greedy (pass@1) and, when sampled, pass@k and pass^k."""
    return agentic_rows(con, ["mode", "domain", "level"], "policy_version = ?", [version])


def tracker_values(rows: list[dict]) -> dict[str, float]:
    """Scalar metrics for a tracker, named eval/agentic/<mode>/<domain>/l<level>/<metric>
    (pass@k as pass_at_k, pass^k as pass_hat_k: names every tracker takes)."""
    out = {}
    for r in rows:
        prefix = f"eval/agentic/{r['mode']}/{r['domain']}/l{r['level']}"
        for name, value in r.items():
            if name in ("mode", "domain", "level") or value is None:
                continue
            out[f"{prefix}/{name.replace('@', '_at_').replace('^', '_hat_')}"] = float(value)
    return out
