"""bench/partial_vs_cut.py's accounting, on a scripted engine that never calls a tool (every
episode runs to its turn cap, as the base model's do) and real bubblewrap: each sampled token
is counted once, cut episodes appear only in the cut arm, carried ones finish in the partial
arm, and a group older than max_lag is restarted with its tokens counted as discarded."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from flywheel.policy.engines.base import Sample
from tests.long_horizon_fixtures import LH, TOK, Replay
from tests.multiturn_fixtures import END

REPLY = "Nothing more." + END  # 23 tokens of the character-level tokenizer
TURN = len(REPLY)
BENCH = Path(__file__).resolve().parents[1] / "bench" / "partial_vs_cut.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("partial_vs_cut", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def two_slots():
    from flywheel.environments.sandbox import Limits
    from flywheel.environments.sandbox.bwrap import BwrapSandbox

    sandbox = BwrapSandbox(Limits(wall_s=10, memory_mb=512, output_bytes=65536), concurrency=2)
    yield sandbox
    sandbox.close()


class Idle(Replay):
    """Replies "Nothing more." to every prompt: no tool call, so every episode runs to its
    turn cap, as the base model's do."""

    def __init__(self):
        super().__init__({})

    def reply(self, prompt, budget):
        ids = [ord(c) for c in REPLY][:budget]
        return Sample(REPLY.removesuffix(END), ids, [-0.5] * len(ids), "stop")


def run(bench, sandbox, budget: int, max_lag: int = 2, cycles: int = 3):
    from flywheel.config import FlywheelConfig

    base = FlywheelConfig(run_id="t", engine={"max_model_len": 10**6},
                          generation={"k": 2, "max_turns": 6, "max_tokens": 64})  # fmt: skip
    parts = bench.Parts(Idle(), TOK, {LH.name: LH}, sandbox)
    return bench.compare(parts, base, level=1, tasks=2, cycles=cycles, budget=budget, max_lag=max_lag,
                         log=lambda s: None)  # fmt: skip


def test_every_sampled_token_is_counted_once_and_carrying_completes_more(bench, two_slots):
    # 4 episodes of 6 turns x 23 tokens a cycle (552 wanted), 2 at a time; no group goes stale
    arms = run(bench, two_slots, budget=100, max_lag=10)
    cut, partial = bench.totals(arms["cut"]), bench.totals(arms["partial"])
    for t in (cut, partial):
        assert t["balanced"] and t["generated"] > 0
    for c in arms["cut"].cycles + arms["partial"].cycles:
        assert (
            100 <= c["generated"] <= 100 + 2 * TURN
        )  # the budget, plus the turns in the engine when it was spent
    assert cut["cut"] == 4 * 3 and cut["cut_unbegun"] == 2 * 3  # none fits a cycle; 2 never got a slot
    assert cut["completed"] == 0 and cut["cut_tokens"] == cut["generated"] and cut["in_flight_tokens"] == 0
    assert cut["train_samples_without_cut"] == 0 < cut["train_samples"]
    assert partial["cut"] == 0 and partial["discarded_tokens"] == 0 and partial["in_flight_episodes"] > 0
    assert partial["completed"] >= 2 and partial["completed_tokens"] == partial["completed"] * 6 * TURN
    assert partial["train_samples"] > 0
    # one reward per ended episode, by how it ended
    for arm, t in ((arms["cut"], cut), (arms["partial"], partial)):
        for kind in ("completed", "cut", "other"):
            assert sum(len(c["rewards"][kind]) for c in arm.cycles) == t[kind]
    assert len(bench.trained_rewards(arms["cut"], drop_cut=False)) == 12
    assert len(bench.trained_rewards(arms["cut"], drop_cut=True)) == 0
    assert len(bench.trained_rewards(arms["partial"], drop_cut=False)) == partial["completed"]
    rates = bench.rates(arms)
    assert rates["completion"]["cut"]["k"] == 0 and rates["completion"]["cut"]["n"] == 12
    assert rates["completion"]["partial"]["k"] == partial["completed"]
    paired = rates["completion"]["partial_minus_cut"]
    assert paired["n"] == 6 and paired["diff"] == pytest.approx(
        partial["completed"] / 12, abs=1e-4
    )  # 2 episodes of each of 6 tasks
    text = bench.table(arms, rates)
    assert "| partial |" in text and f"partial {partial['completed']}/12" in text


def test_a_stale_group_is_restarted_and_its_tokens_discarded(bench, two_slots):
    arms = run(bench, two_slots, budget=40, max_lag=0, cycles=3)  # a group never finishes in one cycle
    partial = bench.totals(arms["partial"])
    assert partial["balanced"] and partial["stale_episodes"] > 0 and partial["discarded_tokens"] > 0
    assert partial["completed"] == 0
