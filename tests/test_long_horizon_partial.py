"""Long horizons (issue 46): partial rollouts carried across cycles (behaviour logprobs,
staleness, exactly once through the lake, and across kill -9), and mixed lengths on a
continuous engine (short episodes finish while long ones play; slots measured). The sandbox
is real bubblewrap; the policy is a scripted engine (a character-level chat tokenizer,
tests/long_horizon_fixtures.py) except in the kill -9 test (the tiny model)."""

from __future__ import annotations

import json
import math
import time

import pytest

from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.tasks.carry import episode_of, resume, settle, state_of
from flywheel.tasks.multiturn import run_episodes
from flywheel.tasks.parking import StageBudget
from tests.long_horizon_fixtures import LH, SPEC, TOK, Continuous, Replay, play, record, reference_script
from tests.multiturn_fixtures import box  # noqa: F401


def test_a_partial_rollout_continues_next_cycle_with_its_behaviour_logprobs(box):  # noqa: F811
    from flywheel.storage.schema import TRAJECTORY_SCHEMA, to_table
    from flywheel.tasks.update import build_batch

    task = LH.make_tasks("train", 1, 5, 1)[0]
    script = {task.prompt[1]["content"]: reference_script(task)}
    budget = StageBudget(tokens=300)  # a few turns of the 9
    first = Replay(script, logprob=-0.25)
    _, (ep,) = play([task], ContextPolicy(), first, sandbox=box, stage_budget=budget, policy_version=3)
    assert ep.parked and ep.score is None and 0 < ep.num_turns < 9 and ep.workspace_tree
    written = [json.loads(s["action"])["arguments"]["path"] for s in ep.steps
               if json.loads(s["action"])["name"] == "write_file"]  # fmt: skip
    assert written  # a note is in the parked workspace's files
    (parked,) = settle([ep], cycle=0, run_id="r")
    assert parked.carry["started_cycle"] == 0 and parked.carry["oldest_version"] == 3
    # the next cycle, from the lake's JSON, under the next policy (its tokens logprob -0.5)
    again = episode_of(json.loads(parked.carry["state_json"]), LH)
    turns_before = again.num_turns
    second = Replay(script, logprob=-0.5)
    second.turn = dict(first.turn)
    run_episodes(second, TOK, box, [], max_turns=200, max_tokens=10**7, sampling=SPEC, carried=[again],
                 policy_version=4)  # fmt: skip
    assert again.finish_reason == "submit" and again.score.verdict == "pass"  # the parked notes survived
    versions = [t["policy_version"] for t in again.history.turns]
    assert versions == [3] * turns_before + [4] * (again.num_turns - turns_before)
    sampled = [x for x in again.completion_logprobs if not math.isnan(x)]
    assert set(
        sampled[: sum(len(t["completion_token_ids"]) for t in again.history.turns[:turns_before])]
    ) == {-0.25}
    assert sampled[-1] == -0.5
    rollout = again.rollout()
    assert rollout.started_cycle == 0 and rollout.policy_version == 3
    row = record(again, "g", cycle=1, version=4)
    assert row.policy_version == 3 and row.started_cycle == 0 and row.cycle == 1
    (sample,), _ = build_batch(to_table([row], TRAJECTORY_SCHEMA), False, trainer_version=5)
    assert sample.policy_lag == 2 and sample.behaviour_differs  # the truncated IS weights apply
    assert sample.old_logprobs == row.completion_logprobs or all(
        (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)
        for a, b in zip(sample.old_logprobs, row.completion_logprobs)
    )


def test_stale_carried_groups_are_dropped_or_restarted():
    task = LH.make_tasks("train", 1, 6, 1)[0]
    ep = run_free_episode(task)
    ep.started_cycle = 0
    ep.history.turns = [{"policy_version": 1, "kind": "act", "head": 0, "start": 0, "end": 0,
                         "completion_token_ids": [], "completion_logprobs": []}]  # fmt: skip
    row = {"started_cycle": 0, "task_id": task.task_id, "domain": LH.name, "sample_index": 0,
           "oldest_version": 1, "state_json": json.dumps(state_of(ep))}  # fmt: skip
    keep, stale = resume([row], {LH.name: LH}, version=3, max_lag=2)
    assert len(keep) == 1 and not stale
    keep, stale = resume([row], {LH.name: LH}, version=4, max_lag=2)
    assert not keep and [t.task_id for t in stale] == [task.task_id]


def run_free_episode(task):
    from flywheel.tasks.multiturn import Episode

    return Episode(task, LH, 0, [dict(m) for m in task.prompt], [1, 2, 3])


def test_short_episodes_finish_while_long_ones_play_and_slots_are_measured(box):  # noqa: F811
    from flywheel.tasks.generate import generation_stats

    long_ = LH.make_tasks("train", 2, 7, 1)  # 33 turns
    short = LH.make_tasks("train", 1, 7, 4)  # 9 turns each
    engine = Continuous({t.prompt[1]["content"]: reference_script(t) for t in long_ + short})
    done = []
    groups = run_episodes(engine, TOK, box, [(t, LH, 1) for t in long_ + short], max_turns=200, max_tokens=10**7,
                          sampling=SPEC, on_episode=done.append, max_live=3)  # fmt: skip
    assert all(g[0].score.verdict == "pass" for g in groups)
    assert [ep.task.level for ep in done] == [1, 1, 1, 1, 2]  # the long one, started first, ends last
    # a short episode takes about its own 9 turns' time, not the long one's 33
    assert max(ep.seconds for ep in done[:4]) < 0.6 * done[-1].seconds
    eps = [ep for g in groups for ep in g]
    stats = generation_stats([ep.rollout() for ep in eps])
    assert len({ep.stage["play_s"] for ep in eps}) == 1 and eps[0].stage["slots"] == 3  # one run, 3 slots
    busy = sum(ep.engine_s for ep in eps) / (3 * eps[0].stage["play_s"])
    assert (
        stats["slot_utilisation"] == pytest.approx(busy, abs=1e-3) and 0.3 < busy <= 1
    )  # the engine is the work
    assert stats["episode_tokens"] == sum(ep.sampled for ep in eps) > 0


class Parts:
    """What the generate stage's body reads (tasks/context.py), without a run."""

    def __init__(self, engine, sandbox):
        self.engine, self.tokenizer, self.sandbox = engine, TOK, sandbox
        self.domains, self.reward_functions, self.judge = {LH.name: LH}, [], None


def test_carried_groups_land_exactly_once_through_the_lake(box, tmp_path):  # noqa: F811
    from flywheel.config import FlywheelConfig
    from flywheel.storage.carried import carried_table, read_carried
    from flywheel.storage.lake import Lake
    from flywheel.tasks.carry import split_parked
    from flywheel.tasks.context import StageContext
    from flywheel.tasks.generate import generation_stats, rollouts
    from flywheel.tasks.records import trajectory_record

    lake = Lake(str(tmp_path / "lake"))
    tasks = LH.make_tasks("train", 1, 8, 3)
    idle = Replay({t.prompt[1]["content"]: [] for t in tasks})  # never calls a tool: 12 turns, then max_turns
    cfg = FlywheelConfig(run_id="r", engine={"max_model_len": 10**6},
                         generation={"k": 2, "max_turns": 12, "max_tokens": 64, "partial": {"stage_tokens": 700}})  # fmt: skip

    def cycle(n: int, todo, carried):
        ctx = StageContext(config=cfg, run_id="r", cycle=n, label="train", policy_version=n, policy_lag=0,
                           generation=cfg.generation)  # fmt: skip
        out = rollouts(Parts(idle, box), ctx, todo, carried)
        stats = generation_stats(out)
        done, parked = split_parked(out)
        return [trajectory_record(ctx, r, r.episode_score) for r in done], parked, stats

    trajs0, parked0, stats = cycle(0, tasks, [])
    assert parked0 and stats["parked"] == len(parked0) and 0 < stats["slot_utilisation"] <= 1
    lake.commit_cycle("r", 0, tasks, trajs0, {"carried": carried_table(parked0)})
    carried = read_carried(lake, "r", 0)
    assert len(carried) == len(parked0) and len(parked0) % 2 == 0  # whole groups
    first, parked1, _ = cycle(1, [], carried)  # a first try at cycle 1, killed before its commit
    trajs1, parked1, stats1 = cycle(1, [], read_carried(lake, "r", 0))  # the re-run, from the same input
    assert {t.trajectory_id for t in trajs1} == {t.trajectory_id for t in first}  # the same ids again
    assert stats1["carried_finished"] == len(trajs1) > 0
    lake.commit_cycle("r", 1, [], trajs1, {"carried": carried_table(parked1)})
    seen = [(t.task_id, t.sample_index) for t in [*trajs0, *trajs1]] + [
        (r["task_id"], r["sample_index"]) for r in read_carried(lake, "r", 1)
    ]
    assert sorted(seen) == sorted((t.task_id, i) for t in tasks for i in range(2))  # each exactly once
    later = lake.trajectories("r", [1]).to_pylist()
    assert all(r["started_cycle"] == 0 and r["cycle"] == 1 and r["policy_version"] == 0 for r in later)
    ids0 = {t.trajectory_id for t in trajs0}
    assert not ids0 & {r["trajectory_id"] for r in later}


def test_carried_groups_take_their_places_among_a_cycles_tasks(tiny_model, tmp_path):
    """A cycle that plays k carried groups draws tasks_per_cycle - k new tasks (none when it
    carries as many), the same ones as a prefix of the full draw: the backlog of a run whose
    episodes outlast their budget stays bounded (bench/README.md, partial against cut)."""
    from flywheel.config import FlywheelConfig
    from flywheel.run.runtime import Runtime
    from flywheel.storage.carried import carried_groups
    from flywheel.tasks.sample import sample

    rt = Runtime(FlywheelConfig(
        run_id="places", runs_dir=str(tmp_path), model={"path": tiny_model}, tracking={"backends": []},
        sampler={"domains": ["longhorizon"], "levels": [1], "tasks_per_cycle": 3}, replay={"enabled": False},
    ))  # fmt: skip
    try:
        draws = {carrying: sample.fn(rt, 1, carrying) for carrying in (0, 1, 3, 5)}
    finally:
        rt.close()
    assert [len(draws[c]) for c in (0, 1, 3, 5)] == [3, 2, 0, 0]
    assert [t.task_id for t in draws[1]] == [t.task_id for t in draws[0][:2]]
    rows = [{"started_cycle": c, "task_id": t} for c, t in [(0, "a"), (0, "a"), (0, "b"), (1, "a")]]
    assert (
        carried_groups(rows) == 3
    )  # (cycle, task): a's two episodes are one group; a again in cycle 1 another


@pytest.mark.integration
@pytest.mark.slow  # ~5 min (two vLLM starts); test_carried_groups_land_exactly_once_through_the_lake covers it fast
def test_partial_rollouts_are_exactly_once_across_kill_9(tiny_model, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from flywheel.storage.carried import read_carried
    from flywheel.storage.lake import Lake

    args = [
        sys.executable, "-m", "flywheel.cli", "run", "--model", tiny_model, "--cycles", "3", "--run-id", "carry",
        "--set", f"runs_dir={tmp_path}", "--set", "sampler.domains=[longhorizon]", "--set", "sampler.levels=[1]",
        "--set", "sampler.tasks_per_cycle=1", "--set", "eval.before_and_after=false", "--set", "generation.k=2",
        "--set", "generation.max_tokens=16", "--set", "generation.max_turns=6", "--set", "engine.max_model_len=1024",
        "--set", "generation.partial.stage_tokens=100", "--set", "replay.enabled=false",
    ]  # fmt: skip
    run = lambda: subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # noqa: E731
                                   start_new_session=True)  # fmt: skip
    summaries = tmp_path / "carry" / "cycles.jsonl"
    proc = run()
    deadline = time.monotonic() + 600
    while not (
        summaries.exists() and summaries.read_text().count("\n") >= 1
    ):  # cycle 0 done: 1 is generating
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "cycle 0 never finished"
        time.sleep(0.05)
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    lake = Lake(str(tmp_path / "carry" / "lake"))
    assert read_carried(lake, "carry", 0)  # cycle 0 parked its group, committed with it

    proc = run()
    out = proc.communicate(timeout=900)[0].decode()
    assert proc.returncode == 0, out[-3000:]
    assert lake.committed_cycles("carry") == [0, 1, 2]
    rows = lake.trajectories("carry").to_pylist()
    began = [(r["started_cycle"] if r["started_cycle"] >= 0 else r["cycle"], r["task_id"], r["sample_index"])
             for r in rows]  # fmt: skip
    began += [(r["started_cycle"], r["task_id"], r["sample_index"]) for r in read_carried(lake, "carry", 2)]
    drawn = [(c, t.task_id, i) for c in range(3) for t in lake.tasks("carry", [c]) for i in range(2)]
    assert sorted(began) == sorted(drawn)  # every episode drawn is trained once or still parked, never twice
    carried = [r for r in rows if r["started_cycle"] >= 0]
    assert carried and all(r["policy_version"] < r["cycle"] or r["cycle"] == 0 for r in carried)
