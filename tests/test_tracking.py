"""Experiment tracking (flywheel/reports/tracking.py) against real MLflow stores (a local SQLite
store and a real `mlflow server`) and real TensorBoard event files; the whole run's
tracking is read back in tests/test_cycle.py."""

import struct
import time

import pytest
from pydantic import ValidationError

from flywheel.config import FlywheelConfig
from flywheel.reports.results import CycleSummary
from flywheel.reports.tracking import Tracker, _Guarded, flatten

from .conftest import free_port


def summary(cycle: int, pass_rate: float) -> CycleSummary:
    return CycleSummary(run_id="t", cycle=cycle, policy_version=cycle, tasks=2, replayed_tasks=0, trajectories=4,
                        mean_reward=pass_rate, pass_rate=pass_rate, queued_for_replay=1,
                        stage_s={"generate": 1.5}, update={"loss": 0.25, "update_cycle": cycle},
                        by_domain_level=[{"domain": "code", "level": 1, "pass_rate": pass_rate}], finished_at="")  # fmt: skip


SAMPLE = {"task_id": "a", "domain": "code", "level": 1, "prompt": "write f", "completion": "def f(): pass\n---\nok",
          "reward": 0.0, "verdict": "fail"}  # fmt: skip


def con():
    """DuckDB with a `trajectories` table of the lake's columns that the samples query reads."""
    import duckdb

    c = duckdb.connect()
    c.execute("""CREATE TABLE trajectories AS SELECT * FROM (VALUES
        ('a', 'code', 1, 't1', 0, [{'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'write f'},
         {'role': 'assistant', 'content': 'def f(): pass'}, {'role': 'assistant', 'content': 'ok'}], 0.0, 'fail'))
        AS t(task_id, domain, level, trajectory_id, cycle, messages, reward, verdict)""")
    c.execute("INSERT INTO trajectories SELECT task_id, domain, level, trajectory_id, cycle + i, messages, reward, "
              "verdict FROM trajectories, range(1, 3) r(i)")  # fmt: skip
    return c


def test_flatten_gives_dotted_params():
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": {}}) == {
        "a.b": "1",
        "a.c.d": "x",
        "e": "[1, 2]",
        "f": "{}",
    }


def test_an_unknown_backend_or_a_bad_uri_stops_at_start_up(tmp_path):
    with pytest.raises(ValidationError, match="comet"):
        FlywheelConfig(tracking={"backends": ["comet"]})
    config = FlywheelConfig(run_id="t", runs_dir=str(tmp_path), tracking={"mlflow_uri": "nosuch://tracker"})
    with pytest.raises(ValueError, match="nosuch://tracker"):
        Tracker.from_config(config)


def test_local_default_and_tensorboard_read_back(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the session's store (tests/conftest.py): not the default
    from mlflow.tracking import MlflowClient
    from tensorboardX.proto import event_pb2

    config = FlywheelConfig(
        run_id="t", runs_dir=str(tmp_path), tracking={"backends": ["mlflow", "tensorboard"]}
    )
    tracker = Tracker.from_config(config)
    tracker.cycle(summary(0, 0.25), con)
    tracker.cycle(summary(1, 0.5), con)
    tracker.close()

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("flywheel").experiment_id])
    assert run.data.tags["flywheel.run_id"] == "t" and run.info.status == "FINISHED"
    assert run.data.params["generation.k"] == str(config.generation.k)
    history = client.get_metric_history(run.info.run_id, "pass_rate")
    assert [(m.step, m.value) for m in history] == [(0, 0.25), (1, 0.5)]
    assert client.get_metric_history(run.info.run_id, "update/loss")[0].value == 0.25
    local = client.download_artifacts(run.info.run_id, "tables/samples/cycle_0001.json", str(tmp_path / "dl"))
    import json

    assert json.load(open(local))["rows"] == [SAMPLE]

    # TensorBoard: the event file's records (length, crc, Event proto, crc)
    [events] = (tmp_path / "t" / "tensorboard").glob("events.out.tfevents.*")
    data, scalars = events.read_bytes(), {}
    while data:
        (n,) = struct.unpack("<Q", data[:8])
        event = event_pb2.Event.FromString(data[12 : 12 + n])
        data = data[16 + n :]
        for v in event.summary.value:
            if v.HasField("simple_value"):
                scalars.setdefault(v.tag, []).append((event.step, round(v.simple_value, 4)))
    assert scalars["pass_rate"] == [(0, 0.25), (1, 0.5)]
    assert scalars["pass_rate/code/l1"] == [(0, 0.25), (1, 0.5)]

    # a resumed run logs into the MLflow run it started
    again = Tracker.from_config(config)
    again.cycle(summary(2, 0.75), con)
    again.close()
    assert len(client.search_runs([run.info.experiment_id])) == 1
    assert len(client.get_metric_history(run.info.run_id, "pass_rate")) == 3


def test_a_server_that_is_down_never_stops_a_cycle_and_gets_the_buffered_calls_later(tmp_path, caplog):
    from mlflow.tracking import MlflowClient

    from .mlflow_server import start_mlflow_server, stop_mlflow_server

    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    config = FlywheelConfig(run_id="late", runs_dir=str(tmp_path), tracking={"mlflow_uri": uri})
    tracker = Tracker.from_config(config)  # nothing listens there yet
    tracker.cycle(summary(0, 0.25), con)
    tracker.cycle(summary(1, 0.5), con)
    warnings = [r for r in caplog.records if "tracking: mlflow failed" in r.getMessage()]
    assert len(warnings) == 1  # warned once, not per call
    assert len(tracker.backends[0].pending) == 1 + 2 * 3  # the start, then per cycle: metrics, update, table

    proc = start_mlflow_server(port, tmp_path / "server")
    try:
        tracker.cycle(summary(2, 0.75), con)
        tracker.close()
        assert tracker.backends[0].pending == []
        client = MlflowClient(uri)
        [run] = client.search_runs([client.get_experiment_by_name("flywheel").experiment_id])
        history = client.get_metric_history(run.info.run_id, "pass_rate")
        assert [(m.step, m.value) for m in history] == [(0, 0.25), (1, 0.5), (2, 0.75)]
        assert run.data.params["tracking.mlflow_uri"] == uri
    finally:
        stop_mlflow_server(proc)


class Flaky:
    """Pure logic: a backend that fails until told otherwise, recording what it got."""

    def __init__(self):
        self.up, self.got = False, []

    def __getattr__(self, name):
        def call(*args):
            if not self.up:
                raise ConnectionError("down")
            self.got.append((name, args))

        return call


def test_drop_loses_what_fails_but_keeps_the_start_and_buffer_is_bounded():
    backend = Flaky()
    dropping = _Guarded("flaky", backend, on_error="drop", buffer_max=100)
    for call in [("start", {}), ("metrics", {"a": 1}, 0), ("metrics", {"a": 2}, 1)]:
        dropping.call(*call)
    assert [m for m, _ in dropping.pending] == ["start"] and dropping.dropped == 2
    backend.up = True
    dropping.call("metrics", {"a": 3}, 2)
    assert backend.got == [("start", ({},)), ("metrics", ({"a": 3}, 2))]

    backend = Flaky()
    buffering = _Guarded("flaky", backend, on_error="buffer", buffer_max=3)
    for i in range(5):
        buffering.call("metrics", {"a": i}, i)
    assert [args[1] for _, args in buffering.pending] == [2, 3, 4] and buffering.dropped == 2


def wandb_records(path):
    """The records of a W&B offline run file: a 7-byte header, then LevelDB-log blocks of
    32 KiB (per chunk: crc32, length, type FULL/FIRST/MIDDLE/LAST) holding Record protos."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, out, pos, parts = path.read_bytes(), [], 7, b""
    while pos + 7 <= len(data):
        left = 32768 - (pos - 7) % 32768
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(parts)
            out.append(record)
            parts = b""
        elif kind == 0:
            break
    return out


def test_wandb_offline_run_reads_back(tmp_path, caplog):
    config = FlywheelConfig(run_id="wb", runs_dir=str(tmp_path), tracking={"backends": ["wandb"]})
    tracker = Tracker.from_config(config)
    tracker.cycle(summary(0, 0.25), con)
    tracker.cycle(summary(1, 0.5), con)

    class Eval:
        policy_version, groups = (
            1,
            [{"group": "code/l1", "pass@1": 0.5, "ci_low": 0.3, "ci_high": 0.7, "n": 40}],
        )
        agentic: list = []  # no episode domains evaluated

    tracker.evaluation(Eval())
    tracker.close()
    failures = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tracking:")]
    assert not failures, failures  # a failed call is only warned: say which and why
    [run_file] = (tmp_path / "wb" / "wandb").glob("offline-run-*/run-wb.wandb")
    deadline = time.monotonic() + 60  # wandb-core may still be writing after finish() returns
    while not (records := wandb_records(run_file)) or not records[-1].HasField("exit"):
        assert time.monotonic() < deadline, [r.WhichOneof("record_type") for r in records]
        time.sleep(0.5)
    import json

    def key(item):  # newer W&B writes nested_key
        return item.key or "/".join(item.nested_key)

    history = [
        {key(i): json.loads(i.value_json) for i in r.history.item} for r in records if r.HasField("history")
    ]
    assert [(h["cycle"], h["pass_rate"]) for h in history if "pass_rate" in h] == [(0, 0.25), (1, 0.5)]
    assert any(h.get("eval/code/l1/pass@1") == 0.5 and h["eval/policy_version"] == 1 for h in history)
    assert sum(h.get("tables/samples/_type") == "table-file" for h in history) == 2
    params = {
        key(i): json.loads(i.value_json) for r in records if r.HasField("run") for i in r.run.config.update
    }
    assert params["generation.k"] == str(config.generation.k)
