"""Compaction changes no query's result (and upgrades old files); the lake opens with
Hugging Face `datasets.load_dataset("parquet", ...)`, locally and on a real S3 server."""

import pyarrow.compute as pc
import pyarrow.parquet as pq

from flywheel.storage.compact import compact, file_count
from flywheel.storage.lake import Lake
from flywheel.storage.query import connect, select_replay
from flywheel.storage.schema import SCHEMA_VERSION, TRAJECTORY_SCHEMA
from flywheel.storage.synthetic import cycle_tables

from .test_schema import write_v1_cycle

QUERIES = [
    "SELECT cycle, domain, level, count(*), round(sum(reward), 6), count(DISTINCT task_id) "
    "FROM trajectories GROUP BY ALL ORDER BY ALL",
    "SELECT run_id, cycle, tasks, trajectories, round(mean_reward, 6), round(pass_rate, 6) FROM cycles ORDER BY ALL",
    "SELECT count(*), count(DISTINCT task_id), sum(cycle) FROM tasks",
    "SELECT trajectory_id, reward FROM trajectories WHERE cycle = 5 ORDER BY trajectory_id",
]


def answers(lake: Lake, run: str) -> list:
    con = connect(lake, run)
    out = [con.execute(q).fetchall() for q in QUERIES]
    out.append([(t.task_id, t.replay_count, t.origin_cycle) for t in select_replay(lake, run, 9, 1.0, 3, 3, "near_miss")])
    out.append(sorted(lake.trajectories(run, cycles=[2, 7])["trajectory_id"].to_pylist()))
    out.append(sorted(t.task_id for t in lake.tasks(run, cycles=[4])))
    return out


def build(lake: Lake, run: str, cycles: range) -> None:
    for c in cycles:
        tasks, trajs = cycle_tables(run, c, 30, k=4, task_pool=60)
        if c == 0:
            write_v1_cycle(lake, run, c, tasks, trajs)  # an old file among them
        else:
            lake.commit_tables(run, c, tasks, trajs)


def test_compaction_keeps_every_answer(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    build(lake, "r", range(10))
    before, files_before = answers(lake, "r"), file_count(lake, "r")
    done = compact(lake, "r", rows_per_file=700)
    assert done["files_before"] == files_before == 40 and done["files_after"] == 2 + 1  # 1200 rows, 300 tasks
    assert file_count(lake, "r") == 3
    assert answers(lake, "r") == before
    # cycle 0's v1 rows now live in files of the current schema (their new fields null)
    for path in lake.dataset("trajectories", "r").files:
        schema = pq.read_schema(path)
        assert schema.names == TRAJECTORY_SCHEMA.names and schema.metadata[b"flywheel.schema_version"] == str(SCHEMA_VERSION).encode()
    # more cycles, then a wider compaction supersedes the first
    build(lake, "r", range(10, 14))
    before = answers(lake, "r")
    compact(lake, "r")
    assert file_count(lake, "r") == 2 and len(lake.compactions("r")) == 1
    assert answers(lake, "r") == before
    assert lake.committed_cycles("r") == list(range(14))
    # a re-run of a committed cycle still changes nothing
    lake.commit_tables("r", 3, *cycle_tables("r", 3, 30, k=4, task_pool=60))
    assert answers(lake, "r") == before


def test_load_dataset_local(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    for c in range(3):
        lake.commit_tables("r", c, *cycle_tables("r", c, 10, k=2))
    lake._write_table(lake._cycle_dir("trajectories", "r", 3) + "/domain=code/part-0.parquet",
                      cycle_tables("r", 3, 10, k=2)[1])  # fmt: skip  (uncommitted: must not show)
    data = lake.load_dataset("trajectories", "r")
    assert data.num_rows == 60 and sorted(set(data["cycle"])) == [0, 1, 2]
    assert data.num_rows == len(set(data["trajectory_id"]))


def test_load_dataset_and_compaction_on_s3(seaweedfs):
    lake = Lake("s3://flywheel-test/compact", endpoint=seaweedfs)
    for c in range(4):
        lake.commit_tables("s", c, *cycle_tables("s", c, 10, k=2))
    ids = sorted(lake.trajectories("s")["trajectory_id"].to_pylist())
    data = lake.load_dataset("trajectories", "s")
    assert sorted(data["trajectory_id"]) == ids
    compact(lake, "s")
    assert file_count(lake, "s") == 2
    assert sorted(lake.load_dataset("trajectories", "s")["trajectory_id"]) == ids
    assert pc.sum(lake.trajectories("s", cycles=[1])["cycle"]).as_py() == 20
