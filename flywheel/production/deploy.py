"""The way out: a policy version goes into serving vLLM servers only through an evaluation gate.

`deploy(lake, run_id, version, urls)`:
1. the serving policy is the lake's last deployed one (storage/deployments.py), else the
   run's starting policy (v0: what production served before this run);
2. the gate pairs the candidate's greedy evaluation with the serving policy's over the
   tasks both saw (flywheel/reports/eval_report.py), per report group (held-out, each suite) and
   per production workload (each `traces:` domain on its own), and refuses when any of
   them is resolvably worse (the 95% interval of the paired difference lies below 0), or
   when either policy has no evaluation to compare;
3. the weights are pushed into every server by the engine's own weight push
   (policy/engines/openai_server.py: by path when the server sees the same files, else
   uploaded), after every server has answered a check, so that one down server stops the
   deploy before any server has changed;
4. the decision (deployed or refused, with the gate's table and the reason) is recorded
   in the lake either way.

Not done: a push that fails half-way through a fleet (a server dying between the check
and its push) leaves the servers before it on the new weights; the error names the URL,
and re-running the deploy finishes the job. No canary or traffic split: that is the
serving layer's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flywheel.reports import eval_report
from flywheel.storage import evals
from flywheel.storage.deployments import Deployments


class DeployRefused(RuntimeError):
    pass


@dataclass
class Gate:
    candidate: tuple[str, int]  # (run, version)
    serving: tuple[str, int]
    rows: list[dict] = field(default_factory=list)  # per group: n, pass@1 of each, the paired difference
    regressions: list[str] = field(default_factory=list)
    reason: str = ""

    @property
    def passed(self) -> bool:
        return not self.reason


def gate(lake, run_id: str, version: int, serving: tuple[str, int]) -> Gate:
    """The candidate (run_id, version) against the serving policy, group by group."""
    g = Gate((run_id, version), serving)
    missing = [f"{r} v{v}" for r, v in (g.candidate, serving) if not lake.has_evaluation(r, v, "greedy")]
    if missing:
        g.reason = (f"no greedy evaluation of {' and '.join(missing)} to compare: "
                    f"run `flywheel eval --run-id RUN --version N` first")  # fmt: skip
        return g
    groups = lake.evaluation_groups(run_id, version) or lake.evaluation_groups(*serving)
    workloads = {d: [d] for names in groups.values() for d in names if d.startswith("traces:")}
    con_candidate = evals.connect(lake, run_id)  # reads every evaluation file of the run: once per run
    con_serving = con_candidate if serving[0] == run_id else evals.connect(lake, serving[0])
    for name, p in eval_report.compare(con_serving, serving[1], con_candidate, version, {**groups, **workloads}):
        g.rows.append({"group": name, **p.as_dict(), "difference": p.describe()})
        if p.high < 0:
            g.regressions.append(name)
    if not g.rows:
        g.reason = f"{run_id} v{version} and {serving[0]} v{serving[1]} share no evaluated task"
    elif g.regressions:
        g.reason = f"resolvably worse than the serving policy on {', '.join(g.regressions)}"
    return g


def deploy(lake, run_id: str, version: int, hf_dir: str, urls: list[str], engine_cfg) -> Gate:
    """Gate, then push `hf_dir` (the candidate's weights) into every server; recorded in the
    lake. Raises DeployRefused (gate failed) or the engine's error naming a server."""
    from flywheel.policy.engines.openai_server import OpenAIServerEngine

    record = Deployments(lake)
    serving = record.serving() or (run_id, 0)
    g = gate(lake, run_id, version, serving)
    if not g.passed:
        record.add(run_id, version, urls, "refused", g.reason, g.rows, serving)
        raise DeployRefused(g.reason)
    # deploy generates nothing, so any context the servers serve will do
    cfg = engine_cfg.model_copy(update={"backend": "openai", "base_urls": list(urls), "max_model_len": 1})
    try:
        engine = OpenAIServerEngine(hf_dir, cfg)  # checks every server, then pushes to each
    except Exception as exc:
        record.add(run_id, version, urls, "failed", str(exc)[:500], g.rows, serving)
        raise
    engine.close()
    record.add(run_id, version, urls, "deployed", "", g.rows, serving)
    return g
