"""The cycle loop's own logic (flows/flywheel.py `_run`), with the stages replaced: which
cycles it runs when the caller decides after each one whether another comes.

The stages themselves run for real in test_cycle.py; here they are stand-ins because the
subject is the loop's control flow, which a real run would take minutes to reach."""

from __future__ import annotations

import itertools
import logging
from datetime import UTC, datetime
from types import SimpleNamespace

import flywheel.flows.flywheel as fw
from flywheel.config import FlywheelConfig, apply_overrides
from flywheel.reports.results import CycleSummary


def summary(cycle: int) -> CycleSummary:
    return CycleSummary(
        run_id="r", cycle=cycle, policy_version=cycle, tasks=1, replayed_tasks=0, trajectories=1,
        mean_reward=0.0,
        pass_rate=0.0, queued_for_replay=0, stage_s={}, update={}, by_domain_level=[],
        finished_at=datetime.now(UTC).isoformat(),
    )  # fmt: skip


def test_the_loop_takes_its_cycles_lazily(monkeypatch, tmp_path):
    """bench/vs_trl.py stops on wall time with an endless generator: a loop that listed
    its cycles first never started one (it ran out of memory instead)."""
    ran: list[int] = []
    noop = lambda *a, **k: None  # noqa: E731
    monkeypatch.setattr(fw, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(fw, "_cold_start", noop)
    monkeypatch.setattr(fw, "publish_cycle", noop)
    monkeypatch.setattr(fw.zero_signal, "signal_rows", lambda con, cycle: [])  # no lake behind this Runtime
    monkeypatch.setattr(fw, "connect", noop)
    monkeypatch.setattr(fw.Tracker, "from_config", lambda cfg: SimpleNamespace(cycle=noop, close=noop))
    monkeypatch.setattr(
        fw, "Runtime", lambda cfg, say: SimpleNamespace(close=noop, engine_version=0, run_dir=tmp_path, lake=None, run_id="r")
    )
    monkeypatch.setattr(
        fw, "UpdatePipeline", lambda rt, lag: SimpleNamespace(drain=noop, take_metrics=dict, abandon=noop)
    )
    monkeypatch.setattr(fw, "run_cycle", lambda rt, cycle, updates: ran.append(cycle) or summary(cycle))
    sets = ["run_id=r", f"runs_dir={tmp_path}", "eval.every_n_cycles=0", "eval.before_and_after=false"]
    config = apply_overrides(FlywheelConfig(), sets)

    def until_three_ran(rt):
        for cycle in itertools.count():  # endless, like a wall-clock budget
            if len(ran) == 3:
                return
            assert cycle == len(ran), "the loop asked for a cycle before it ran the one before"
            yield cycle

    result = fw._run(config, until_three_ran)
    assert ran == [0, 1, 2] and [c.cycle for c in result.cycles] == [0, 1, 2]
    assert fw._run(config, lambda rt: iter(())).cycles == []  # nothing planned, nothing run
