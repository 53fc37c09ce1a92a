"""Schema evolution: a lake holding files of an older version (v1: no `origin_cycle`, no
task `cycle`) reads through today's reader, and a marker from a newer version is refused."""

import json

import pyarrow as pa
import pytest

from flywheel.storage.lake import Lake, LakeError
from flywheel.storage.query import connect, select_replay
from flywheel.storage.schema import SCHEMA_VERSION, TASK_SCHEMA, TRAJECTORY_SCHEMA
from flywheel.storage.synthetic import cycle_tables

V1_DROPPED = {"tasks": ["origin_cycle", "cycle"], "trajectories": ["origin_cycle", "policy_lag", "reward_components"]}


V1_MESSAGE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))  # before v5's tool calls


def as_v1(table: pa.Table, kind: str) -> pa.Table:
    table = table.drop_columns(V1_DROPPED[kind])
    column = "prompt" if kind == "tasks" else "messages"
    old = [[{"role": m["role"], "content": m["content"]} for m in ms] for ms in table[column].to_pylist()]
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(old, V1_MESSAGE))
    return table.replace_schema_metadata({"flywheel.schema_version": "1", "flywheel.record": kind[:-1]})


def write_v1_cycle(lake: Lake, run: str, cycle: int, tasks: pa.Table, trajs: pa.Table) -> None:
    """What the walking skeleton's lake wrote: v1 files and a marker without a version."""
    files = [f"tasks/run={run}/cycle={cycle}/part-0.parquet"]
    lake._write_table(lake._path(files[0]), as_v1(tasks, "tasks"))
    for domain in sorted(set(trajs["domain"].to_pylist())):
        files.append(f"trajectories/run={run}/cycle={cycle}/domain={domain}/part-0.parquet")
        part = trajs.filter(pa.compute.equal(trajs["domain"], domain))
        lake._write_table(lake._path(files[-1]), as_v1(part, "trajectories"))
    marker = {"run_id": run, "cycle": cycle, "tasks": tasks.num_rows, "trajectories": trajs.num_rows, "files": files}
    lake._write_bytes(lake._marker(run, cycle), json.dumps(marker).encode())


def test_v1_files_read_next_to_current_ones(tmp_path):
    assert SCHEMA_VERSION == 6
    lake = Lake(str(tmp_path / "lake"))
    old_tasks, old_trajs = cycle_tables("r", 0, 20, k=2, task_pool=40)
    write_v1_cycle(lake, "r", 0, old_tasks, old_trajs)
    new_tasks, new_trajs = cycle_tables("r", 1, 20, k=2, task_pool=40)
    lake.commit_tables("r", 1, new_tasks, new_trajs)
    table = lake.trajectories("r")
    assert table.schema.names == TRAJECTORY_SCHEMA.names and table.num_rows == 80
    by_cycle = connect(lake, "r").execute(
        "SELECT cycle, count(*), count(origin_cycle), count(policy_lag) FROM trajectories GROUP BY cycle ORDER BY cycle"
    ).fetchall()
    assert by_cycle == [(0, 40, 0, 0), (1, 40, 40, 40)]  # v1 rows: later columns read as null
    specs = lake.tasks("r", cycles=[0])
    assert len(specs) == 20 and all(s.origin_cycle == -1 for s in specs)  # the field's default
    # v1 messages (role, content) read through v5's (tool_calls, tool_call_id as null), and a
    # prompt comes back as the plain messages it was written as
    assert specs[0].prompt == [{"role": "user", "content": specs[0].prompt[0]["content"]}]
    assert table.column("messages")[0].as_py()[0]["tool_calls"] is None
    assert lake.dataset("tasks", "r").schema.names == TASK_SCHEMA.names
    # replay over a window holding both versions: a v1 failure's origin is its cycle
    queue = select_replay(lake, "r", 1, threshold=1.0, lookback=2, max_replays=3)
    failed_only_in_0 = set(old_tasks["task_id"].to_pylist()) - set(new_tasks["task_id"].to_pylist())
    from_v1 = [t for t in queue if t.task_id in failed_only_in_0]
    assert from_v1 and all(t.origin_cycle == 0 and t.origin == "replay" for t in from_v1)


def test_a_newer_marker_is_refused_with_a_clear_error(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.commit_tables("r", 0, *cycle_tables("r", 0, 4))
    marker = lake.read_marker("r", 0)
    marker["schema_version"] = SCHEMA_VERSION + 1
    lake._write_bytes(lake._marker("r", 0), json.dumps(marker).encode())
    with pytest.raises(LakeError, match=f"schema v{SCHEMA_VERSION + 1}, newer than"):
        lake.trajectories("r")
