"""Fan-out's pure parts (flywheel/run/fanout.py): how work is cut into shards, the config a
worker receives, and that the local backend stays free of Ray. The Ray path itself runs
on a real cluster in tests/test_ray_fanout.py."""

import subprocess
import sys

import pytest

from flywheel.config import FlywheelConfig
from flywheel.run.fanout import portable, split


@pytest.mark.parametrize("n,shards", [(7, 3), (2, 5), (6, 2), (1, 1), (0, 2)])
def test_split_is_contiguous_and_even(n, shards):
    items = list(range(n))
    pieces = split(items, shards)
    assert [x for p in pieces for x in p] == items
    assert all(pieces) and len(pieces) == min(n, shards)
    assert not pieces or max(map(len, pieces)) - min(map(len, pieces)) <= 1


def test_portable_config_names_the_lake_and_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = portable(FlywheelConfig(run_id="r", runs_dir="runs", model={"path": "m"}))
    assert cfg.store.uri == str(tmp_path / "runs" / "r" / "lake") and cfg.runs_dir == str(tmp_path / "runs")
    assert cfg.model.path == str(tmp_path / "m")
    s3 = portable(FlywheelConfig(run_id="r", store={"uri": "s3://b/p"}))
    assert s3.store.uri == "s3://b/p" and s3.model.path is None


def test_local_backend_imports_no_ray():
    code = (
        "import sys; import flywheel.flows.flywheel, flywheel.flows.evaluate, flywheel.run.shards\n"
        "from flywheel.run.fanout import make_fanout\n"
        "from flywheel.config import FlywheelConfig\n"
        "class Rt: config = FlywheelConfig()\n"
        "f = make_fanout(Rt())\n"
        "assert f.map(lambda rt, ctx, items: [(i, ctx) for i in items], [1, 2], 3) == [(1, 3), (2, 3)]\n"
        "print(type(f).__name__, sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'prefect_ray')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "LocalFanout []"
