"""Per-cycle reports: metrics from the lake, a reward curve, and Prefect artifacts.

Artifacts are only created inside a Prefect run (the CLI runs inside one too), and a
failure to publish one is logged, never fatal: reporting must not stop the flywheel.
"""

from __future__ import annotations

import base64
import io
import logging

log = logging.getLogger("flywheel")

BY_DOMAIN_LEVEL_SQL = """
SELECT domain, level, count(*) AS trajectories, count(DISTINCT task_id) AS tasks,
       round(avg(reward), 4) AS mean_reward, round(avg((verdict = 'pass')::INT), 4) AS pass_rate
FROM trajectories WHERE cycle = ? GROUP BY domain, level ORDER BY domain, level
"""


def by_domain_level(con, cycle: int) -> list[dict]:
    cur = con.execute(BY_DOMAIN_LEVEL_SQL, [cycle])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def curve_png(cycles: list[int], rewards: list[float], pass_rates: list[float], title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    ax.plot(cycles, rewards, marker="o", label="mean reward")
    ax.plot(cycles, pass_rates, marker="s", label="pass rate")
    ax.set_xlabel("cycle")
    ax.set_ylim(0, max([1e-3, *rewards, *pass_rates]) * 1.15)  # a run whose cycles all parked: none yet
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def artifact_key(*parts) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    text = "-".join(str(p) for p in parts).lower()
    return "".join(ch if ch.isalnum() else "-" for ch in text)[:120]


CURVE_SQL = "SELECT cycle, mean_reward, pass_rate FROM cycles ORDER BY cycle"  # storage/query.py's view


def publish_table(run_id: str, name: str, rows: list[dict], description: str) -> None:
    """A table artifact of the run (inside a Prefect run only; never fatal)."""
    try:
        from prefect.artifacts import create_table_artifact
        from prefect.context import FlowRunContext

        if FlowRunContext.get() is not None and rows:
            create_table_artifact(rows, key=artifact_key(run_id, name), description=description)
    except Exception as exc:  # noqa: BLE001  reporting never stops the flywheel
        log.warning("could not publish the %s table: %s", name, exc)


DOMAIN_CYCLES_SQL = """
SELECT domain, cycle, pass_rate FROM domain_cycles WHERE split = 'train' ORDER BY domain, cycle
"""


def domains_png(rows: list[tuple[str, int, float]], title: str) -> bytes | None:
    """Pass rate per domain (rows) and cycle (columns); blank where a domain was not
    sampled. None for a run of one domain (the reward curve says it all)."""
    domains, cycles = sorted({r[0] for r in rows}), sorted({r[1] for r in rows})
    if len(domains) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.full((len(domains), len(cycles)), np.nan)
    for d, c, p in rows:
        grid[domains.index(d), cycles.index(c)] = p
    fig, ax = plt.subplots(
        figsize=(min(14, 3 + 0.3 * len(cycles)), min(30, 1 + 0.22 * len(domains))), dpi=100
    )
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ax.set_yticks(range(len(domains)), domains, fontsize=7)
    ax.set_xticks(range(len(cycles)), cycles, fontsize=7)
    ax.set_xlabel("cycle")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="pass rate")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def publish_cycle(rt, summary) -> None:
    """Table per domain and level, markdown summary, reward curve over every committed
    cycle of the run (read from the lake, so resumed runs draw the whole curve), link."""
    from flywheel.storage.query import connect

    con = connect(rt.lake, rt.run_id)
    rows = con.execute(CURVE_SQL).fetchall()
    png = curve_png([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], f"run {rt.run_id}")
    (rt.run_dir / "reward_curve.png").write_bytes(png)
    heat = domains_png(con.execute(DOMAIN_CYCLES_SQL).fetchall(), f"run {rt.run_id}: pass rate per domain")
    if heat:
        (rt.run_dir / "domains.png").write_bytes(heat)
    try:
        from prefect.artifacts import (
            create_image_artifact,
            create_link_artifact,
            create_markdown_artifact,
            create_table_artifact,
        )
        from prefect.context import FlowRunContext

        if FlowRunContext.get() is None:
            return
        run = rt.run_id
        create_table_artifact(
            summary.by_domain_level,
            key=artifact_key(run, "metrics"),
            description=f"cycle {summary.cycle} by domain and level",
        )
        stages = "\n".join(f"| {k} | {v:.1f} |" for k, v in summary.stage_s.items())
        from flywheel.reports.zero_signal import notes, signal_rows

        said = "".join(f"\n**{note}**\n" for note in notes(signal_rows(con, summary.cycle)))
        create_markdown_artifact(
            f"### {run}, cycle {summary.cycle}\n\n"
            f"- tasks: {summary.tasks} ({summary.replayed_tasks} replayed)\n"
            f"- trajectories: {summary.trajectories}\n- mean reward: {summary.mean_reward:.3f}\n"
            f"- pass rate: {summary.pass_rate:.3f}\n- policy version: {summary.policy_version}\n"
            f"- queued for replay: {summary.queued_for_replay}\n{said}\n"
            f"| stage | seconds |\n|---|---|\n{stages}\n",
            key=artifact_key(run, "summary"),
        )  # fmt: skip
        data_url = "data:image/png;base64," + base64.b64encode(png).decode()
        create_image_artifact(
            data_url, key=artifact_key(run, "reward-curve"), description="reward and pass rate per cycle"
        )
        if heat:
            heat_url = "data:image/png;base64," + base64.b64encode(heat).decode()
            create_image_artifact(
                heat_url, key=artifact_key(run, "domains"), description="pass rate per domain and cycle"
            )
        uri = rt.config.lake_uri.rstrip("/")
        create_link_artifact(
            f"{uri}/trajectories/run={run}/cycle={summary.cycle}" if uri.startswith("s3://") else
            f"file://{rt.lake.root}/trajectories/run={run}/cycle={summary.cycle}",
            link_text=f"trajectories of cycle {summary.cycle}", key=artifact_key(run, "lake"),
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001  reporting never stops the flywheel
        log.warning("could not publish Prefect artifacts: %s", exc)


def eval_curve_png(points: dict[str, list[tuple[int, float, float, float]]], title: str) -> bytes:
    """pass@1 per policy version, one line per group, with its 95% interval as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for group, rows in points.items():
        xs, ys = [r[0] for r in rows], [r[1] for r in rows]
        err = [[y - r[2] for y, r in zip(ys, rows)], [r[3] - y for y, r in zip(ys, rows)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=group)
    ax.set_xlabel("policy version")
    ax.set_ylabel("greedy pass@1")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def publish_eval_curve(rt, by_group: dict[str, list[str]]) -> None:
    """Every evaluated version of the run, from the lake: runs/<id>/eval_curve.png and an
    image artifact."""
    from flywheel.reports import eval_report
    from flywheel.storage import evals

    con = evals.connect(rt.lake, rt.run_id)
    versions = [
        v for (v,) in con.execute("SELECT DISTINCT policy_version FROM eval_cells ORDER BY 1").fetchall()
    ]
    points: dict[str, list] = {}
    for v in versions:
        for g in eval_report.groups(eval_report.cells(con, v), by_group):
            points.setdefault(g["group"], []).append((v, g["pass@1"], g["ci_low"], g["ci_high"]))
    if not points:
        return
    png = eval_curve_png(points, f"run {rt.run_id}: held-out and suites")
    (rt.run_dir / "eval_curve.png").write_bytes(png)
    try:
        from prefect.artifacts import create_image_artifact
        from prefect.context import FlowRunContext

        if FlowRunContext.get() is not None:
            data_url = "data:image/png;base64," + base64.b64encode(png).decode()
            create_image_artifact(
                data_url, key=artifact_key(rt.run_id, "eval-curve"), description="pass@1 per version"
            )
    except Exception as exc:  # noqa: BLE001  reporting never stops the flywheel
        log.warning("could not publish the eval curve: %s", exc)
