"""The bubblewrap backend holds the basic line: no network, no host files, no root,
no host environment, limits enforced, every process killed at the time limit."""

import os
import time
from pathlib import Path

import pytest
from flywheel.environments.sandbox import Job, Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox


@pytest.fixture(scope="module")
def box():
    return BwrapSandbox(Limits(wall_s=5, memory_mb=256, max_procs=16, file_size_mb=1, output_bytes=1000), 4)


def py(box, code, **kw):
    return box.run(Job(["python", "-c", code], **kw))


def test_runs_code_with_files_and_stdin(box):
    res = box.run(
        Job(
            ["python", "main.py"],
            files={"main.py": "import sys; print(sys.stdin.read().upper())"},
            stdin="hi",
        )
    )
    assert res.exit_code == 0 and res.stdout.strip() == "HI" and res.error is None


def test_not_root_and_no_capabilities(box):
    res = py(
        box, "import os; print(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])"
    )
    uid, cap_eff = res.stdout.split()
    assert uid != "0" and int(cap_eff, 16) == 0


def test_no_network(box):
    res = py(box, "import socket; socket.create_connection(('127.0.0.1', 22), timeout=2)")
    assert res.exit_code != 0
    res = py(box, "import socket; print(len(socket.if_nameindex()))")
    assert res.stdout.strip() == "1"  # only the namespace's own loopback


def test_no_host_files_or_environment(box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    os.environ["FLYWHEEL_TEST_SECRET"] = "s3cr3t"
    try:
        res = py(
            box,
            f"import os; print(os.path.exists({str(secret)!r}), os.path.exists('/root'), dict(os.environ))",
        )
    finally:
        del os.environ["FLYWHEEL_TEST_SECRET"]
    assert res.stdout.startswith("False False") and "s3cr3t" not in res.stdout


def test_cannot_write_outside_workspace(box):
    res = py(box, "open('/usr/evil', 'w')")
    assert res.exit_code != 0 and "Read-only" in res.stderr


def test_wall_time_kills_detached_children(box):
    seconds = str(3000 + os.getpid() % 1000)  # a sleep we can recognise in ps
    code = f"import subprocess, time; subprocess.Popen(['sleep', '{seconds}'], start_new_session=True); time.sleep(60)"
    t0 = time.monotonic()
    res = py(box, code, limits=Limits(wall_s=1))
    assert res.timed_out and time.monotonic() - t0 < 5
    time.sleep(0.3)
    assert f"sleep {seconds}" not in os.popen("ps -eo args").read()


def test_memory_process_and_file_limits(box):
    assert py(box, "x = bytearray(1 << 30)").exit_code != 0
    assert (
        "BlockingIOError"
        in py(box, "import os\nfor _ in range(64): os.fork() or __import__('time').sleep(2)").stderr
    )
    assert "File too large" in py(box, "open('big', 'w').write('x' * (2 << 20))").stderr


def test_output_is_capped_and_marked(box):
    res = py(box, "print('x' * 100000)")
    assert res.truncated and len(res.stdout) == 1000


def test_map_keeps_order(box):
    results = box.map([Job(["python", "-c", f"print({i})"]) for i in range(8)])
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(8)]


def test_file_names_cannot_escape(box):
    res = box.run(Job(["python", "-c", "pass"], files={"../../etc/x": "no"}))
    assert res.error and "escapes" in res.error


def test_process_backend_is_loudly_unsafe_but_keeps_limits():
    from flywheel.environments.sandbox.process import ProcessSandbox

    with pytest.warns(UserWarning, match="WITHOUT isolation"):
        box = ProcessSandbox(Limits(wall_s=1), 2)
    assert not box.safe
    assert box.run(Job(["python", "-c", "print(6 * 7)"])).stdout.strip() == "42"
    assert box.run(Job(["python", "-c", "while True: pass"])).timed_out


def test_make_sandbox_rejects_unknown_backends():
    from flywheel.environments.sandbox import make_sandbox

    from flywheel.config import SandboxConfig

    assert make_sandbox(SandboxConfig()).name == "bwrap"
    with pytest.raises(ValueError):
        make_sandbox(SandboxConfig.model_construct(backend="firejail"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the drop to nobody happens only when we are root")
def test_root_starts_workers_as_host_nobody_without_forking_itself(monkeypatch):
    """Popen(user=...) makes CPython fork() the whole host process (vfork is refused with a
    uid change), and a host holding gigabytes is then refused the fork (ENOMEM, as CI saw
    once trainers had run). The drop is setpriv's, in the child: Popen gets no uid."""
    import subprocess

    from flywheel.environments.sandbox import bwrap

    calls = []
    real = subprocess.Popen

    def recording(argv, **kw):
        calls.append(kw)
        return real(argv, **kw)

    monkeypatch.setattr(bwrap.subprocess, "Popen", recording)
    sandbox = BwrapSandbox(Limits(wall_s=5), 1)
    try:
        assert py(sandbox, "print('up')").stdout.strip() == "up"
        assert calls and not any({"user", "group", "extra_groups"} & set(kw) for kw in calls)
        (worker,) = sandbox._all
        status = Path(f"/proc/{worker.transport.proc.pid}/status").read_text()
        uids = status.split("Uid:")[1].split("\n")[0].split()
        assert set(uids) == {str(bwrap.NOBODY)}
    finally:
        sandbox.close()
