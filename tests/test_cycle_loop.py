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
        fw,
        "Runtime",
        lambda cfg, say: SimpleNamespace(
            close=noop, engine_version=0, run_dir=tmp_path, lake=None, run_id="r"
        ),
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


def test_base_before_cold_start_evaluates_the_base_then_serves_the_sft_policy(monkeypatch, tmp_path):
    """`eval.base_before_cold_start`: the first evaluation is of v0, taken before the SFT;
    the engine then gets the SFT policy before cycle 0 and the cycles start with no second
    "before"; off, the order is as it was (SFT, then the starting policy's evaluation)."""
    noop = lambda *a, **k: None  # noqa: E731
    events: list = []

    class FakeRuntime:
        def __init__(self, cfg, say):
            self.policy_version, self.loaded = 0, None  # the engine starts on first use, as the real one
            self.run_dir, self.lake, self.run_id = tmp_path, None, "r"

        @property
        def engine_version(self):
            if self.loaded is None:
                self.loaded = self.policy_version
            return self.loaded

        def state(self):
            return SimpleNamespace(new=self.policy_version == 0)

        def load_policy_into_engine(self, version):
            events.append(("load", version))
            self.loaded = version

        def close(self):
            pass

    def cold_start(config, rt):
        events.append(("sft", rt.policy_version))
        rt.policy_version = 1  # what fine_tune publishes

    def evaluate(rt):
        events.append(("eval", rt.engine_version))
        return SimpleNamespace(policy_version=rt.engine_version), False

    monkeypatch.setattr(fw, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(fw, "_cold_start", cold_start)
    monkeypatch.setattr(fw, "evaluate_and_track", evaluate)
    monkeypatch.setattr(fw, "eval_line", lambda result: "")
    monkeypatch.setattr(fw, "Runtime", FakeRuntime)
    monkeypatch.setattr(
        fw.Tracker, "from_config", lambda cfg: SimpleNamespace(cycle=noop, close=noop, evaluation=noop)
    )
    monkeypatch.setattr(
        fw, "UpdatePipeline", lambda rt, lag: SimpleNamespace(drain=noop, take_metrics=dict, abandon=noop)
    )
    monkeypatch.setattr(fw, "publish_cycle", noop)
    monkeypatch.setattr(fw.zero_signal, "signal_rows", lambda con, cycle: [])
    monkeypatch.setattr(fw, "connect", noop)

    def run_cycle(rt, cycle, updates):
        events.append(("cycle", rt.engine_version))
        rt.policy_version = rt.loaded = rt.engine_version + 1
        return summary(cycle)

    monkeypatch.setattr(fw, "run_cycle", run_cycle)
    monkeypatch.setattr(fw, "FlywheelResult", lambda **fields: SimpleNamespace(**fields))
    base = ["run_id=r", f"runs_dir={tmp_path}", "cold_start.references=8", "eval.every_n_cycles=0"]
    fw._run(
        apply_overrides(FlywheelConfig(), [*base, "eval.base_before_cold_start=true"]), lambda rt: range(2)
    )
    assert events == [("eval", 0), ("sft", 0), ("load", 1), ("cycle", 1), ("cycle", 2), ("eval", 3)]
    events.clear()
    fw._run(apply_overrides(FlywheelConfig(), base), lambda rt: range(2))
    assert events == [("sft", 0), ("eval", 1), ("cycle", 1), ("cycle", 2), ("eval", 3)]
