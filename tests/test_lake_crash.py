"""Exactly once under crashes: a writer process SIGKILLed at random points, and an S3
server restarted in the middle of a write. After every kill only whole committed cycles
are visible; after resuming, every row is there exactly once and no partial file or
unfinished upload is left."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.fs as pafs

from flywheel.storage.lake import Lake
from flywheel.storage.seaweed import SeaweedServer

WRITER = str(Path(__file__).with_name("lake_writer.py"))
TASKS, K = 1000, 4
ROWS_PER_CYCLE = TASKS * K


def start_writer(root: str, cycles: int, endpoint: str | None = None) -> subprocess.Popen:
    cmd = [sys.executable, WRITER, root, str(cycles), str(TASKS), *([endpoint] if endpoint else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def check_visible(lake: Lake) -> tuple[int, int]:
    """Every committed cycle whole, none doubled. Returns (cycles, rows)."""
    table = lake.trajectories("crash")
    cycles = lake.committed_cycles("crash")
    assert cycles == list(range(len(cycles))), cycles  # the writer commits in order
    assert table.num_rows == len(cycles) * ROWS_PER_CYCLE, (table.num_rows, cycles)
    assert pc.count_distinct(table["trajectory_id"]).as_py() == table.num_rows
    for cycle in cycles:
        assert lake.read_marker("crash", cycle)["trajectories"] == ROWS_PER_CYCLE
    return len(cycles), table.num_rows


def leftovers(lake: Lake) -> list[str]:
    """Files no committed marker accounts for (a crash's partial writes)."""
    committed = set(lake.data_files("trajectories", "crash")) | set(lake.data_files("tasks", "crash"))
    committed = {f.removeprefix("s3://") for f in committed}
    infos = lake.fs.get_file_info(pafs.FileSelector(lake.root, recursive=True, allow_not_found=True))
    return [
        i.path for i in infos
        if i.type == pafs.FileType.File and not i.path.startswith(lake._path("_commits") + "/") and i.path not in committed
    ]  # fmt: skip


def kill_and_resume(
    lake: Lake, root: str, cycles: int, kills: int, rng: random.Random, window_s: float, endpoint=None
) -> list[dict]:
    log = []
    for n in range(kills):
        proc = start_writer(root, cycles, endpoint)
        time.sleep(rng.uniform(0.0, window_s))
        os.kill(proc.pid, signal.SIGKILL)
        started = [line.split()[1] for line in proc.communicate()[0].splitlines() if line.startswith("cycle ")]
        at = int(started[-1]) if started else None
        partial = leftovers(lake)
        committed, rows = check_visible(lake)
        log.append({"kill": n, "last_cycle_started": at, "committed": committed, "rows": rows, "partial_files": len(partial)})
    return log


def finish(lake: Lake, root: str, cycles: int, endpoint=None) -> None:
    proc = start_writer(root, cycles, endpoint)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "done" in out, out
    assert check_visible(lake) == (cycles, cycles * ROWS_PER_CYCLE)
    assert leftovers(lake) == []


def test_sigkill_at_random_points_local(tmp_path):
    root = str(tmp_path / "lake")
    lake, cycles = Lake(root), 80
    log = kill_and_resume(lake, root, cycles, kills=12, rng=random.Random(7), window_s=0.3)
    for entry in log:
        print(entry)
    assert len(log) == 12 and log[-1]["committed"] < cycles, "the writer finished before the last kill"
    assert any(e["partial_files"] for e in log), "no kill landed mid-write: the test proved nothing"
    finish(lake, root, cycles)
    print(f"local: 12 kills, {cycles * ROWS_PER_CYCLE} rows expected and found, 0 duplicates")


def test_s3_server_restart_mid_write_and_kills(tmp_path, monkeypatch):
    server = SeaweedServer(tmp_path / "s3", access_key="crash", secret_key="crash-secret")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)  # the writer processes inherit them
    try:
        server.start(bucket="lake")
        root, cycles = "s3://lake/crash", 12
        lake = Lake(root, server.endpoint)
        log = kill_and_resume(lake, root, cycles, kills=4, rng=random.Random(3), window_s=1.0, endpoint=server.endpoint)
        print(*log, sep="\n")
        proc = start_writer(root, cycles, server.endpoint)
        time.sleep(0.5)
        server.stop()  # mid-write: the writer's requests fail and are retried
        time.sleep(2)
        server.start()
        out, _ = proc.communicate(timeout=300)
        print(out[-600:])
        check_visible(lake)
        finish(lake, root, cycles, server.endpoint)
        uploads = server.client().list_multipart_uploads(Bucket="lake").get("Uploads", [])
        assert uploads == [], uploads
    finally:
        server.stop()
