"""The lake: commit markers, replace-on-rerun, replay selection; locally and on a real
SeaweedFS S3 server."""

import dataclasses
import math

import pyarrow.fs as pafs
import pytest

from flywheel.environments import get_environment
from flywheel.storage.lake import Lake, LakeError
from flywheel.storage.query import connect, select_replay
from flywheel.storage.schema import Trajectory

env = get_environment("code")


def make_trajectories(run_id, cycle, tasks, rewards_by_task, k=2):
    out = []
    for task in tasks:
        for i in range(k):
            out.append(Trajectory(
                trajectory_id=Trajectory.make_id(run_id, cycle, task.task_id, i), run_id=run_id, cycle=cycle,
                policy_version=cycle, task_id=task.task_id, domain=task.domain, level=task.level,
                split=task.split, origin=task.origin, replay_count=task.replay_count, group_id=task.task_id,
                sample_index=i, messages=[{"role": "assistant", "content": "x"}], steps=[],
                prompt_token_ids=[1, 2], completion_token_ids=[3], completion_logprobs=[-0.5],
                finish_reason="stop", num_turns=1, num_tool_calls=0, reward=rewards_by_task[task.task_id][i],
                reward_outcome=0.0, reward_process=0.0, reward_penalty=0.0, verdict="fail", error="",
                tests_passed=0, tests_total=8, sandbox_backend="bwrap", verifier_version="code-1", timings_json="{}",
            ))  # fmt: skip
    return out


def check_commit_and_replay(lake: Lake):
    run = "r1"
    tasks = env.make_tasks("train", 1, 0, 4)
    rewards = {
        tasks[0].task_id: [1, 1],
        tasks[1].task_id: [0, 0.5],
        tasks[2].task_id: [0, 0],
        tasks[3].task_id: [1, 0],
    }
    trajs = make_trajectories(run, 0, tasks, rewards)
    assert lake.committed_cycles(run) == []
    lake.commit_cycle(run, 0, tasks, trajs)
    lake.commit_cycle(run, 0, tasks, trajs)  # idempotent: no duplicates
    assert lake.committed_cycles(run) == [0]
    table = lake.trajectories(run)
    assert table.num_rows == 8 and len(set(table.column("trajectory_id").to_pylist())) == 8
    # failures: best reward < 1 -> tasks 1 and 2; the near miss (0.5) first
    queue = select_replay(lake, run, 0, threshold=1.0, lookback=3, max_replays=2)
    assert [t.task_id for t in queue] == [tasks[1].task_id, tasks[2].task_id]
    assert all(t.origin == "replay" and t.replay_count == 1 for t in queue)
    # cycle 1 replays them; task 1 is solved now, task 2 fails again
    rewards1 = {queue[0].task_id: [1, 1], queue[1].task_id: [0, 0]}
    lake.commit_cycle(run, 1, queue, make_trajectories(run, 1, queue, rewards1))
    queue2 = select_replay(lake, run, 1, threshold=1.0, lookback=3, max_replays=2)
    assert [(t.task_id, t.replay_count) for t in queue2] == [(tasks[2].task_id, 2)]
    lake.commit_cycle(run, 2, queue2, make_trajectories(run, 2, queue2, {tasks[2].task_id: [0, 0]}))
    assert select_replay(lake, run, 2, threshold=1.0, lookback=3, max_replays=2) == []  # cap reached
    assert select_replay(lake, run, 5, threshold=1.0, lookback=3, max_replays=9) == []  # aged out
    con = connect(lake, run)
    assert con.execute("SELECT count(*) FROM trajectories WHERE cycle = 1").fetchone()[0] == 4
    assert lake.committed_cycles(run) == [0, 1, 2]


def test_local_lake(tmp_path):
    check_commit_and_replay(Lake(str(tmp_path / "lake")))


def test_uncommitted_cycle_is_invisible_and_replaced(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    tasks = env.make_tasks("train", 1, 0, 2)
    trajs = make_trajectories("r", 0, tasks, {t.task_id: [0, 1] for t in tasks})
    lake.commit_cycle("r", 0, tasks, trajs)
    # a crashed attempt at cycle 1 leaves a file but no marker
    lake._write_table(lake._cycle_dir("trajectories", "r", 1) + "/domain=code/part-0.parquet",
                      lake.trajectories("r", [0]))  # fmt: skip
    assert lake.trajectories("r").num_rows == 4
    redo = [dataclasses.replace(t, cycle=1) for t in trajs]
    lake.commit_cycle("r", 1, tasks, redo)
    assert lake.trajectories("r", [1]).num_rows == 4 and lake.trajectories("r").num_rows == 8


def test_replay_queue_roundtrip(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    assert lake.read_replay_queue("r", 1) is None
    tasks = env.make_tasks("train", 2, 0, 2)
    lake.write_replay_queue("r", 1, tasks)
    assert [t.task_id for t in lake.read_replay_queue("r", 1)] == [t.task_id for t in tasks]
    lake.write_replay_queue("r", 2, [])
    assert lake.read_replay_queue("r", 2) == []


def test_s3_lake_on_seaweedfs(seaweedfs):
    lake = Lake("s3://flywheel-test/lake-unit", endpoint=seaweedfs)
    assert isinstance(lake.fs, pafs.S3FileSystem)
    check_commit_and_replay(lake)


def test_unreachable_s3_endpoint_is_named():
    with pytest.raises(LakeError, match="127.0.0.1:9"):
        Lake("s3://bucket/x", endpoint="http://127.0.0.1:9")


def test_sft_demonstrations_from_the_lake_are_passing_and_unique(tmp_path):
    from flywheel.flows.sft import demonstrations_from_lake

    lake = Lake(str(tmp_path / "lake"))
    tasks = env.make_tasks("train", 1, 0, 2)
    trajs = make_trajectories("r", 0, tasks, {tasks[0].task_id: [1.0, 1.0], tasks[1].task_id: [0.5, 0.0]})
    trajs[1].completion_token_ids = [4, 5]  # two different passing answers to task 0
    lake.commit_cycle("r", 0, tasks, trajs)
    demos = demonstrations_from_lake(lake, "r", min_reward=1.0)
    assert sorted(c for _, c, _ in demos) == [[3], [4, 5]]
    assert all(mask == [0.0] * len(c) for _, c, mask in demos)


def test_cli_query_and_report(tmp_path):
    from typer.testing import CliRunner

    from flywheel.cli import app

    lake = Lake(str(tmp_path / "r" / "lake"))
    tasks = env.make_tasks("train", 2, 0, 2)
    lake.commit_cycle(
        "r", 0, tasks, make_trajectories("r", 0, tasks, {t.task_id: [1.0, 0.25] for t in tasks})
    )
    runner = CliRunner()
    res = runner.invoke(app, ["query", "SELECT count(*) AS n, max(reward) AS best FROM trajectories",
                              "--run-id", "r", "--runs-dir", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0 and "4" in res.output and "1.0" in res.output, res.output
    res = runner.invoke(app, ["report", "--store", str(tmp_path / "r" / "lake")], terminal_width=200)
    assert res.exit_code == 0 and "0.625" in res.output, res.output  # mean of 1.0 and 0.25
    flat = [tasks[0]]  # a second cycle whose one group scored alike: zero variance 1.0
    lake.commit_cycle("r", 1, flat, make_trajectories("r", 1, flat, {flat[0].task_id: [0.0, 0.0]}))
    res = runner.invoke(
        app, ["report", "--store", str(tmp_path / "r" / "lake"), "--by", "domain"], terminal_width=200
    )
    lines = [ln.replace("│", " ").split() for ln in res.output.splitlines() if ln.startswith("│ r ")]
    assert res.exit_code == 0 and [ln[:3] for ln in lines] == [["r", "0", env.name], ["r", "1", env.name]], (
        res.output
    )
    assert lines[0][-2] == "0.0" and lines[1][-2] == "1.0", res.output  # zero_variance per cycle
    assert (
        runner.invoke(app, ["report", "--store", str(tmp_path / "r" / "lake"), "--by", "nope"]).exit_code == 2
    )
    res = runner.invoke(
        app, ["query", "SELECT nope FROM trajectories", "--run-id", "r", "--runs-dir", str(tmp_path)]
    )
    assert res.exit_code == 2


def test_replay_priorities_and_origin(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    t = env.make_tasks("train", 1, 0, 3) + env.make_tasks("train", 3, 0, 1)
    # cycle 0: a near miss (0.75) and a flat failure; cycle 1: two more failures of other levels
    c0 = [dataclasses.replace(x, origin_cycle=0) for x in t[:2]]
    lake.commit_cycle(
        "r", 0, c0, make_trajectories("r", 0, c0, {t[0].task_id: [0.75, 0.5], t[1].task_id: [0, 0]})
    )
    c1 = [dataclasses.replace(x, origin_cycle=1) for x in t[2:]]
    lake.commit_cycle(
        "r", 1, c1, make_trajectories("r", 1, c1, {t[2].task_id: [0.25, 0], t[3].task_id: [0, 0]})
    )
    order = {
        p: [x.task_id for x in select_replay(lake, "r", 1, 1.0, 3, 3, p)]
        for p in ("recent", "near_miss", "hardest")
    }
    ids = [x.task_id for x in t]
    assert order["recent"] == [ids[2], ids[3], ids[0], ids[1]]  # newest cycle first, then best
    assert order["near_miss"] == [ids[0], ids[2], ids[3], ids[1]]  # best reward first
    assert order["hardest"] == [ids[3], ids[1], ids[2], ids[0]]  # worst first; level 3 before 1
    queue = select_replay(lake, "r", 1, 1.0, 3, 3)
    assert {x.task_id: x.origin_cycle for x in queue} == {ids[0]: 0, ids[1]: 0, ids[2]: 1, ids[3]: 1}
    # replay.min_best (default 0): near misses only, not tasks no sample earned anything on
    assert [x.task_id for x in select_replay(lake, "r", 1, 1.0, 3, 3, "near_miss", min_best=0.0)] == [
        ids[0],
        ids[2],
    ]
    # a replayed task keeps the cycle it first ran in
    lake.commit_cycle("r", 2, queue[:1], make_trajectories("r", 2, queue[:1], {queue[0].task_id: [0, 0]}))
    again = {x.task_id: x for x in select_replay(lake, "r", 2, 1.0, 3, 3)}
    assert (
        again[queue[0].task_id].origin_cycle == queue[0].origin_cycle
        and again[queue[0].task_id].replay_count == 2
    )
    with pytest.raises(ValueError, match="unknown replay priority"):
        select_replay(lake, "r", 1, 1.0, 3, 3, "random")
    cycles = connect(lake, "r").execute(
        "SELECT cycle, tasks, trajectories, replayed_tasks FROM cycles ORDER BY 1"
    )
    assert cycles.fetchall() == [(0, 2, 4, 0), (1, 2, 4, 0), (2, 1, 2, 1)]


def test_cycles_view_counts_the_tokens_the_model_sampled(tmp_path):
    """Observation tokens of a multi-turn trajectory (NaN logprobs) are not the model's."""
    lake = Lake(str(tmp_path / "lake"))
    tasks = env.make_tasks("train", 1, 0, 2)
    rows = make_trajectories("r", 0, tasks, {t.task_id: [1, 0] for t in tasks})
    rows[0] = dataclasses.replace(
        rows[0], completion_token_ids=[3, 4, 5, 6], completion_logprobs=[-0.1, math.nan, math.nan, -0.2]
    )
    lake.commit_cycle("r", 0, tasks, rows)
    assert connect(lake, "r").execute("SELECT sampled_tokens FROM cycles").fetchall() == [(2 + 3,)]


def test_domain_cycles_view_weighs_each_sample_once(tmp_path):
    """A group of 4 passing samples and a group of 2 failing ones: 4 of 6 samples pass
    (0.667), where averaging the groups' rates would say 0.5."""
    lake = Lake(str(tmp_path / "lake"))
    a, b = env.make_tasks("train", 1, 0, 2)
    rows = make_trajectories("r", 0, [a], {a.task_id: [1] * 4}, k=4)
    rows += make_trajectories("r", 0, [b], {b.task_id: [0, 0.5]}, k=2)
    rows = [dataclasses.replace(r, verdict="pass" if r.reward == 1 else "fail") for r in rows]
    lake.commit_cycle("r", 0, [a, b], rows)
    got = connect(lake, "r").execute(
        "SELECT run_id, cycle, domain, split, samples, mean_reward, pass_rate FROM domain_cycles"
    )
    (row,) = got.fetchall()
    assert row[:5] == ("r", 0, "code", "train", 6)
    assert row[5] == pytest.approx(4.5 / 6) and row[6] == pytest.approx(4 / 6)


def test_a_dir_the_store_lists_but_calls_missing_on_delete_loses_its_files(tmp_path):
    """SeaweedFS after a restart mid-write listed a cycle dir whose recursive delete then
    said 'Path does not exist' (CI, tests/test_lake_crash.py): the delete falls back to
    the files under it. The store's refusal is simulated; the files are real."""
    lake = Lake(str(tmp_path / "lake"))
    part = lake._path("trajectories", "run=r", "cycle=0", "domain=code", "part-0.parquet")
    lake._write_bytes(part, b"partial")

    class PhantomDir(pafs.PyFileSystem):
        def delete_dir(self, path):
            raise FileNotFoundError(2, f"Path does not exist '{path}/'")

    lake.fs = PhantomDir(pafs.FSSpecHandler(__import__("fsspec").filesystem("file")))
    lake._delete_dir(lake._path("trajectories", "run=r", "cycle=0"))
    assert lake.fs.get_file_info(part).type == pafs.FileType.NotFound
