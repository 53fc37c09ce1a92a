"""`flywheel store serve`: a local S3 server a run can use, gone when the command stops."""

import signal
import subprocess
import sys
from pathlib import Path

from flywheel.storage.lake import Lake
from flywheel.storage.seaweed import GRPC_OFFSET, free_port, weed_ports
from flywheel.storage.synthetic import cycle_tables


def test_store_serve_serves_a_lake_and_stops_cleanly(tmp_path, monkeypatch):
    port = free_port()
    cli = Path(sys.executable).parent / "flywheel"
    proc = subprocess.Popen(
        [str(cli), "store", "serve", "--data-dir", str(tmp_path / "s3"), "--port", str(port), "--bucket", "lake"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        first = proc.stdout.readline()
        assert f"S3 at http://127.0.0.1:{port}" in first, first
        exports = proc.stdout.readline().split("export", 1)[1].split()
        for item in exports:  # the credentials the command told us to export
            monkeypatch.setenv(*item.split("=", 1))
        lake = Lake("s3://lake/served", f"http://127.0.0.1:{port}")
        lake.commit_tables("r", 0, *cycle_tables("r", 0, 5))
        assert Lake("s3://lake/served", f"http://127.0.0.1:{port}").trajectories("r").num_rows == 20
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    left = [
        p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, f"-s3.port={port}")
    ]
    assert proc.returncode == 0 and left == [], (proc.returncode, left)


def _cmdline_has(proc_dir: Path, needle: str) -> bool:
    try:
        return needle in (proc_dir / "cmdline").read_bytes().decode(errors="replace")
    except OSError:  # the process is gone
        return False


def test_weed_ports_leave_every_grpc_port_to_its_own_component():
    """weed mini refuses a port that another component's gRPC (its port + 10000) would take:
    the CI-sized failure of 2026-12-07 ("reserved for gRPC calculation")."""
    for _ in range(50):
        avoid = free_port() % 30000 + 20000  # a port of the caller, below 55536
        ports = weed_ports(4, avoid=(avoid,))
        pairs = [q for p in [*ports, avoid] for q in (p, p + GRPC_OFFSET)]
        assert len(set(pairs)) == len(pairs) and max(pairs) <= 65535, (ports, avoid)
