"""`flywheel report --by workload`: per production workload, what came in and how the policy does.

One row per workload found in the lake's traces or named in `workloads`:
  traces            ingested traces (storage/traces.py);
  tasks             traces that became tasks (a verifier configured; the rest quarantined);
  logged_failed     share of those tasks whose logged response failed, with its 95% interval;
  trained_pass      pass rate of the run's latest training cycle on them (samples);
  heldout_pass@1    greedy pass@1 of the latest evaluated policy on the workload's
                    held-out tasks, with its interval (the eval split of `traces:W`);
  judge             the run's judged trajectories of the workload: scored, errors, and
                    the share where the judge and the verifier disagree (storage/query.py's
                    `components` view).
"""

from __future__ import annotations

import pyarrow.compute as pc

from flywheel.config import FlywheelConfig
from flywheel.reports.stats import wilson
from flywheel.storage.lake import Lake
from flywheel.storage.traces import TraceStore

TRAINED_SQL = """
SELECT domain, sum(pass_rate * samples) / sum(samples), sum(samples)::INT FROM domain_cycles
WHERE domain LIKE 'traces:%' AND cycle = (SELECT max(cycle) FROM domain_cycles) GROUP BY domain
"""
JUDGE_SQL = """
SELECT domain, count(*) FILTER (WHERE name = 'judge' AND value IS NOT NULL)::INT,
       count(*) FILTER (WHERE name = 'judge' AND value IS NULL)::INT,
       count(*) FILTER (WHERE name = 'judge_agrees')::INT, count(*) FILTER (WHERE name = 'judge_agrees' AND value = 0)::INT
FROM components WHERE domain LIKE 'traces:%' GROUP BY domain
"""
HELDOUT_SQL = """
SELECT domain, sum(solved)::INT, sum(tasks)::INT FROM eval_cells
WHERE mode = 'greedy' AND domain LIKE 'traces:%'
  AND policy_version = (SELECT max(policy_version) FROM eval_cells WHERE domain LIKE 'traces:%')
GROUP BY domain
"""


def _interval(k: int, n: int) -> str:
    if not n:
        return "-"
    low, high = wilson(k, n)
    return f"{k / n:.3f} [{low:.3f}, {high:.3f}] (n={n})"


def workload_rows(config: FlywheelConfig) -> list[dict]:
    from flywheel.environments.registry import DomainError, resolve_traces
    from flywheel.config.production import trace_source
    from flywheel.storage import evals
    from flywheel.storage.query import connect

    lake = Lake(config.lake_uri, config.store.endpoint, config.store.region)
    traces = TraceStore(lake).dataset().to_table(columns=["workload_id"])
    counts = {r["values"]: r["counts"] for r in pc.value_counts(traces.column("workload_id")).to_pylist()}
    trained, heldout, judged = {}, {}, {}
    if lake.committed_cycles(config.run_id):
        con = connect(lake, config.run_id)
        trained = {d: (p, n) for d, p, n in con.execute(TRAINED_SQL).fetchall()}
        judged = {d: rest for d, *rest in con.execute(JUDGE_SQL).fetchall()}
    if lake.evaluation_files(config.run_id):
        heldout = {
            d: (k, n) for d, k, n in evals.connect(lake, config.run_id).execute(HELDOUT_SQL).fetchall()
        }
    source = trace_source(config)
    rows = []
    for name in sorted(set(counts) | set(config.workloads)):
        domain, tasks, failed, note = f"traces:{name}", 0, 0, ""
        if name not in config.workloads:
            note = "no verifier configured (workloads.<name>)"
        else:
            try:
                env = resolve_traces(domain, source)
                tasks, failed = env.rows, env.logged_failure_count
                note = f"{len(env.quarantined)} traces not tasks" if env.quarantined else ""
            except DomainError as exc:
                note = str(exc)
        p, n = trained.get(domain, (None, 0))
        k, m = heldout.get(domain, (0, 0))
        scored, errors, checked, disagree = judged.get(domain, (0, 0, 0, 0))
        judge = (
            f"{scored} scored, {errors} errors, disagrees {_interval(disagree, checked)}"
            if scored + errors
            else "-"
        )
        rows.append({
            "workload": name, "traces": counts.get(name, 0), "tasks": tasks,
            "logged_failed": _interval(failed, tasks), "trained_pass": f"{p:.3f} (n={n})" if n else "-",
            "heldout_pass@1": _interval(k, m), "judge": judge, "note": note,
        })  # fmt: skip
    return rows
