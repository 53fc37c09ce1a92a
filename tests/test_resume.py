"""A flywheel killed in the middle resumes at the stage where it stopped: the CLI is
killed (SIGKILL, whole process group) right after cycle 0 is committed to the lake; the
same run id then finishes the run without regenerating cycle 0."""

import os
import signal
import subprocess
import sys
import time

import pytest

from flywheel.storage.lake import Lake

pytestmark = pytest.mark.integration


def cli(args, **kw):
    cmd = [sys.executable, "-m", "flywheel.cli", "run", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, **kw)


@pytest.mark.slow  # ~210 s: resume is test_cycle's and test_interrupt's too; SIGKILL mid-write is test_lake_crash's
def test_killed_run_resumes_without_regenerating(tiny_model, tmp_path):
    args = [
        "--model", tiny_model, "--cycles", "2", "--run-id", "killed",
        "--set", f"runs_dir={tmp_path}", "--set", "sampler.tasks_per_cycle=2", "--set", "eval.before_and_after=false",
        "--set", "generation.k=2", "--set", "generation.max_tokens=16", "--set", "engine.max_model_len=512",
    ]  # fmt: skip
    marker = tmp_path / "killed" / "lake" / "_commits" / "run=killed" / "cycle=0.json"
    proc = cli(args)
    deadline = time.monotonic() + 400
    while not marker.exists():
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "cycle 0 was never committed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    lake = Lake(str(tmp_path / "killed" / "lake"))
    before = lake.trajectories("killed", [0])
    assert lake.committed_cycles("killed") == [0]

    proc = cli(args)
    out = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == 0, out[-3000:]
    after = lake.trajectories("killed", [0])
    assert after.column("created_at").to_pylist() == before.column("created_at").to_pylist()
    assert lake.committed_cycles("killed") == [0, 1]
    assert "cycle 0:" in out and "cycle 1:" in out
