"""The escape suite, part 2: resources, processes, signals, privileges and the worker
itself, on both backends; see test_files_and_network.py for part 1."""

from __future__ import annotations

import os
import secrets
import signal
import time

import pytest

from flywheel.environments.sandbox import Limits
from tests.sandbox_fixtures import LIMITS, host_processes_with, py, serves


# ---- resources ------------------------------------------------------------------------------
def test_fork_bomb(contained):
    marker = f"bomb-{secrets.token_hex(4)}"
    res = py(contained, f"""
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.05)  # {marker}
""")
    assert res.timed_out or res.exit_code != 0
    assert res.duration_s < LIMITS.wall_s + 2
    time.sleep(0.2)
    assert host_processes_with(marker) == []


def test_memory_bomb(contained):
    res = py(contained, "x = []\nwhile True: x.append(bytearray(16 << 20))")
    assert res.exit_code != 0 and "MemoryError" in res.stderr
    res = py(contained, "x = bytearray(8 << 30)")
    assert res.exit_code != 0


def test_disk_fill(contained):
    res = py(contained, """
import os
for d in ['/work', '/tmp']:
    n = 0
    try:
        while True:
            with open(f'{d}/fill{n}', 'wb') as f:
                f.write(b'x' * (2 << 20)); n += 1
    except OSError as e:
        print(d, type(e).__name__, n)
""")
    assert res.stdout.count("OSError") == 2 and res.exit_code == 0
    assert py(contained, "import os; print(os.listdir('/work'), os.listdir('/tmp'))").stdout.strip() == "[] []"


def test_huge_stdout_and_stderr(contained):
    t0 = time.monotonic()
    res = py(contained, "import sys\nfor _ in range(2000): sys.stdout.write('x' * 50000); sys.stderr.write('y' * 50000)")
    assert res.truncated and len(res.stdout) == LIMITS.output_bytes and len(res.stderr) == LIMITS.output_bytes
    assert time.monotonic() - t0 < LIMITS.wall_s + 2


def test_infinite_loop(contained):
    res = py(contained, "while True: pass")
    assert res.timed_out or res.exit_code == -signal.SIGXCPU or res.exit_code == -signal.SIGKILL
    assert res.duration_s < LIMITS.wall_s + 1


def test_sleeping_past_the_wall_clock(contained):
    res = py(contained, "import time; time.sleep(60)", limits=Limits(wall_s=0.5))
    assert res.timed_out and res.duration_s < 1.5


# ---- processes ------------------------------------------------------------------------------
@pytest.mark.parametrize("style", ["detached", "daemonised"])
def test_children_outliving_the_execution(contained, style):
    marker = f"{style}-{secrets.token_hex(4)}"
    spawn = (f"subprocess.Popen(['sleep', '3{os.getpid() % 100}'], start_new_session=True); print('{marker}')"
             if style == "detached" else f"""
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.closerange(0, 3)
        os.execv('/bin/sh', ['sh', '-c', 'sleep 300 # {marker}'])
    os._exit(0)
os.wait(); print('{marker}')""")
    res = py(contained, f"import os, signal, subprocess\n{spawn}")
    assert marker in res.stdout and not res.timed_out  # returned at once, not at the wall clock
    time.sleep(0.2)
    assert host_processes_with(marker) == [] and host_processes_with(f"sleep 3{os.getpid() % 100}") == []


def test_signalling_the_worker(contained):
    spawned = contained.spawned
    res = py(contained, """
import os, signal
for pid in (os.getppid(), 1):
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGINT):
        try:
            os.kill(pid, sig)
        except OSError as e:
            print(type(e).__name__)
os.kill(-1, signal.SIGKILL)
""")
    assert res.error is None and serves(contained) and contained.spawned == spawned  # same worker


def test_ptrace_the_worker(contained):
    res = py(contained, """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print(libc.ptrace(16, 1, 0, 0), libc.ptrace(16, os.getppid(), 0, 0))  # PTRACE_ATTACH
""")
    assert res.stdout.split() == ["-1", "-1"]


def test_new_user_namespace_and_mounts(contained):
    res = py(contained, """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print(libc.unshare(0x10000000), libc.unshare(0x00020000))  # CLONE_NEWUSER, CLONE_NEWNS
print(libc.mount(b'none', b'/work', b'tmpfs', 0, None), libc.chroot(b'/tmp'))
""")
    assert res.stdout.split() == ["-1", "-1", "-1", "-1"]


def test_setuid_attempts(contained):
    res = py(contained, """
import os, subprocess
for fn in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.seteuid(0)):
    try:
        fn(); print('BECAME ROOT')
    except OSError:  # EPERM, or EINVAL where uid 0 does not even exist (bwrap)
        print('denied')
status = open('/proc/self/status').read()
print([l for l in status.splitlines() if l.startswith(('CapEff', 'NoNewPrivs', 'Uid'))])
for suid in ('/usr/bin/su', '/usr/bin/passwd', '/usr/bin/mount', '/usr/bin/sudo'):
    if os.path.exists(suid):
        r = subprocess.run([suid, '--help'], capture_output=True)
print(os.getuid(), os.geteuid())
""")
    assert "BECAME ROOT" not in res.stdout and res.stdout.count("denied") == 3
    assert "CapEff:\\t0000000000000000" in res.stdout and "NoNewPrivs:\\t1" in res.stdout
    assert res.stdout.split()[-2:] != ["0", "0"] and "0" not in res.stdout.split()[-2:]


def test_killing_the_worker_from_outside_respawns(box):
    """The code cannot kill its worker (above), but the machine can: the job in flight
    gets an infrastructure error (score.py retries it) and the pool starts a new worker."""
    import threading

    spawned = box.spawned
    worker = next(iter(box._all))
    killer = threading.Timer(0.5, worker.transport.kill)
    killer.start()
    res = py(box, "import time; time.sleep(2)")
    killer.join()
    assert res.error and "died" in res.error
    assert serves(box) and box.spawned == spawned + 1
    assert box.idle_leftovers() == []


def test_a_hung_worker_is_killed_and_removed(box):
    """A worker that stops answering (stopped from the host here) is killed at wall +
    grace; under docker the container itself is removed, not only our client."""
    worker = next(iter(box._all))
    t = worker.transport
    if hasattr(t, "container"):
        t.container.pause()
    else:
        os.kill(t.proc.pid, signal.SIGSTOP)
        for child in open(f"/proc/{t.proc.pid}/task/{t.proc.pid}/children").read().split():
            os.kill(int(child), signal.SIGSTOP)
    box.grace_s, saved = 1.0, box.grace_s
    try:
        res = py(box, "print(1)", limits=Limits(wall_s=0.5))
    finally:
        box.grace_s = saved
    assert res.error and "died" in res.error and worker.dead
    if hasattr(t, "container"):
        import docker

        with pytest.raises(docker.errors.NotFound):
            t.client.containers.get(t.container.id)
    else:
        assert t.proc.poll() is not None
    assert serves(box)


def test_an_execution_cannot_find_an_earlier_ones_code(contained):
    """The worker forks children from itself: nothing of an earlier execution (here a
    trajectory's command with a secret) may remain in it for a later child to find."""
    left, right = secrets.token_hex(6), secrets.token_hex(6)
    with contained.workspace() as ws:
        ws.run(code=f"secret = {left + right!r}", stdin=left + right)
    res = py(contained, f"""
import gc, sys, types
def search():  # everything reachable from the stack (the worker's frames too) and the gc
    target = {left!r} + {right!r}
    todo, seen, f = list(gc.get_objects()), set(), sys._getframe(1)
    while f:
        todo += [f.f_locals, f.f_globals, f.f_code]
        f = f.f_back
    while todo:
        o = todo.pop()
        if id(o) in seen or o is target:
            continue
        seen.add(id(o))
        if isinstance(o, str) and target in o or isinstance(o, (bytes, bytearray)) and target.encode() in o:
            return True
        todo += gc.get_referents(o)
        if isinstance(o, types.CodeType):
            todo += o.co_consts
        if isinstance(o, dict):  # gc does not report str keys
            todo += list(o)
    return False
print(search())
""")
    assert res.stdout.strip() == "False"
