"""What experiment tracking costs per cycle, as a share of a cycle (as bench/orchestration.py
measures Prefect's).

Times `Tracker.cycle` (a summary with 12 domain-level rows, the update's metrics, 8 sample
completions read from DuckDB, the reward curve image) and `Tracker.evaluation` (12 groups)
for each backend: none (the baseline: the same calls with no backend), MLflow's local
SQLite store (the default), a real `mlflow server` on loopback (from .venv-mlflow),
TensorBoard event files and W&B in offline mode. The share is against a cycle's stage
time, read from a run's cycles.jsonl or given in seconds (default: the 114 s default
cycle of bench/README.md).

    .venv/bin/python bench/tracking.py [runs/<run id>/cycles.jsonl | SECONDS]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import flywheel  # noqa: E402

flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
from flywheel.config import FlywheelConfig
from flywheel.reports.summary import curve_png
from flywheel.reports.results import CycleSummary
from flywheel.reports.tracking import Tracker

CYCLES = 20
REPO = Path(__file__).resolve().parent.parent


class Result:
    def __init__(self, pass_rate: float, version: int):
        self.policy_version = version
        self.groups = [
            {"group": f"d{i}/l1", "pass@1": pass_rate, "ci_low": 0.1, "ci_high": 0.6, "n": 40}
            for i in range(12)
        ]
        self.agentic: list[dict] = []  # no episode domains


def lake_connection():
    import duckdb

    con = duckdb.connect()
    con.execute("""CREATE TABLE trajectories AS SELECT 't' || i AS task_id, 'code' AS domain, 1 AS level,
        'id' || i AS trajectory_id, c AS cycle, [{'role': 'user', 'content': repeat('prompt ', 60)},
        {'role': 'assistant', 'content': repeat('completion ', 80)}] AS messages, 0.5 AS reward, 'fail' AS verdict
        FROM range(64) r(i), range(?) cy(c)""", [CYCLES])  # fmt: skip
    return con


def summary(cycle: int) -> CycleSummary:
    rows = [
        {"domain": f"d{i}", "level": 1, "trajectories": 8, "mean_reward": 0.3, "pass_rate": 0.25}
        for i in range(12)
    ]
    return CycleSummary(run_id="bench", cycle=cycle, policy_version=cycle, tasks=8, replayed_tasks=2, trajectories=64,
                        mean_reward=0.3, pass_rate=0.25, queued_for_replay=3,
                        stage_s={s: 10.0 for s in ("sample", "generate", "score", "archive", "update", "replay")},
                        update={"loss": 0.1, "kl": 0.01, "grad_norm": 1.0, "update_cycle": cycle},
                        by_domain_level=rows, finished_at="")  # fmt: skip


def per_cycle(backends: list[str], root: Path, uri: str = "") -> tuple[float, float]:
    """(median seconds per cycle, seconds to start: import, store creation, the run)."""
    config = FlywheelConfig(run_id=f"bench-{'-'.join(backends) or 'none'}", runs_dir=str(root),
                            tracking={"backends": backends, "mlflow_uri": uri})  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    con, curve = lake_connection(), root / "reward_curve.png"
    curve.write_bytes(curve_png(list(range(20)), [0.3] * 20, [0.25] * 20, "bench"))
    t0 = time.perf_counter()
    tracker = Tracker.from_config(config)
    start = time.perf_counter() - t0
    times = []
    for cycle in range(CYCLES):
        t0 = time.perf_counter()
        tracker.cycle(summary(cycle), lambda: con, curve)
        tracker.evaluation(Result(0.3, cycle))
        times.append(time.perf_counter() - t0)
    tracker.close()
    return statistics.median(times), start


def main() -> None:
    arg = sys.argv[1] if len(sys.argv) > 1 else "114"
    if arg.endswith(".jsonl"):
        stages = [sum(v for k, v in json.loads(ln)["stage_s"].items() if k != "cycle") for ln in open(arg)]
        cycle_s = statistics.median(stages)
    else:
        cycle_s = float(arg)
    sys.path.insert(0, str(REPO))
    from tests.mlflow_server import start_mlflow_server, stop_mlflow_server
    from flywheel.storage.seaweed import free_port

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        port = free_port()
        server = start_mlflow_server(port, root / "server")
        try:
            rows = {
                "none (baseline)": per_cycle([], root / "none"),
                "mlflow, local SQLite (default)": per_cycle(["mlflow"], root / "local"),
                "mlflow, server on loopback": per_cycle(
                    ["mlflow"], root / "remote", f"http://127.0.0.1:{port}"
                ),
                "tensorboard": per_cycle(["tensorboard"], root / "tb"),
                "wandb, offline": per_cycle(["wandb"], root / "wandb"),
            }
        finally:
            stop_mlflow_server(server)
    base = rows["none (baseline)"][0]
    print(f"median per cycle over {CYCLES} cycles; share of a {cycle_s:.0f} s cycle; start-up once per run")
    print("| backend | per cycle | over baseline | share of the cycle | start-up |\n|---|---|---|---|---|")
    for name, (t, start) in rows.items():
        print(
            f"| {name} | {1000 * t:.1f} ms | {1000 * (t - base):+.1f} ms | {100 * (t - base) / cycle_s:.3f}% "
            f"| {start:.2f} s |"
        )


if __name__ == "__main__":
    main()
