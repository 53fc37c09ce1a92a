"""The escape suite: hostile programs, each run on both backends (real bwrap, real
dockerd). Every test asserts the specific containment (a planted host secret is not
read, a host listener gets no connection, a canary is absent, no process survives),
and then that the pool still serves the next execution with nothing left behind."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import time

import pytest

from environments.sandbox import Job, Limits
from tests.sandbox_fixtures import BACKENDS, host_processes_with, make_box, serves

LIMITS = Limits(wall_s=3, cpu_s=3, memory_mb=256, max_procs=24, file_size_mb=4, output_bytes=4096)
CANARY = "flywheel-canary-" + secrets.token_hex(8)


@pytest.fixture(scope="module", params=BACKENDS)
def box(request):
    # The canary is in our environment (and AWS's variable) when the workers start.
    saved = {k: os.environ.get(k) for k in ("FLYWHEEL_CANARY", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update({"FLYWHEEL_CANARY": CANARY, "AWS_SECRET_ACCESS_KEY": CANARY})
    try:
        box = make_box(request.param, LIMITS, concurrency=1)  # one worker: the next run lands on it
        box.warm()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    yield box
    box.close()


@pytest.fixture
def contained(box):
    """After the hostile program: the same pool answers, and nothing of it lives on."""
    yield box
    time.sleep(0.05)
    assert serves(box), "the pool no longer serves"
    assert box.idle_leftovers() == [], "processes survived inside the sandbox"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("host-secret")
    (d / ".aws").mkdir()
    (d / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {CANARY}\n")
    (d / "secret.txt").write_text(CANARY)
    return d


def py(box, code, **kw):
    return box.run(Job(["python", "-c", code], **kw))


# ---- host files ---------------------------------------------------------------------------
def test_reads_a_planted_host_file(contained, secret_file):
    code = f"""
for p in [{str(secret_file / 'secret.txt')!r}, {str(secret_file / '.aws/credentials')!r},
          '/proc/1/root' + {str(secret_file / 'secret.txt')!r}, '/root/.aws/credentials', '/etc/shadow']:
    try:
        print(open(p).read())
    except OSError as e:
        print('denied', p, type(e).__name__)
"""
    res = py(contained, code)
    assert CANARY not in res.stdout and res.stdout.count("denied") == 5


def test_searches_the_filesystem_for_the_secret(contained, secret_file):
    code = f"""
import os
tops = [p for p in os.listdir('/') if p not in ('proc', 'sys', 'usr', 'dev') and not os.path.islink('/' + p)]
for top in tops:
    for root, dirs, files in os.walk('/' + top):
        for f in files:
            try:
                if {CANARY!r} in open(os.path.join(root, f), errors='ignore').read(1 << 20):
                    print('FOUND', root, f)
            except OSError:
                pass
        if {secret_file.name!r} in dirs:
            print('FOUND DIR', root)
print('searched')
"""
    res = py(contained, code)
    assert "searched" in res.stdout and "FOUND" not in res.stdout


def test_writes_outside_the_workspace(contained, secret_file):
    target = secret_file / "planted-by-sandbox"
    code = f"""
import os
for p in [{str(target)!r}, '/usr/evil', '/etc/evil', '/evil', '/proc/sys/kernel/hostname', '/dev/evil']:
    try:
        open(p, 'w').write('x'); print('WROTE', p)
    except OSError:
        pass
open('/work/ok', 'w').write('fine'); print('work ok')
"""
    res = py(contained, code)
    assert "WROTE" not in res.stdout and "work ok" in res.stdout and not target.exists()


def test_tmp_is_not_the_hosts_tmp(contained):
    name = f"/tmp/flywheel-escape-{secrets.token_hex(4)}"
    res = py(contained, f"open({name!r}, 'w').write('x'); print('ok')")
    assert res.stdout.strip() == "ok" and not os.path.exists(name)


def test_symlinks_out_of_the_workspace(contained, secret_file):
    secret = str(secret_file / "secret.txt")
    code = f"""
import os
os.symlink({secret!r}, 'link'); os.symlink('/proc/1/environ', 'env'); os.symlink('/', 'root')
for p in ['link', 'env', 'root' + {secret!r}]:
    try:
        print(open(p).read())
    except OSError as e:
        print('denied', type(e).__name__)
"""
    assert CANARY not in py(contained, code).stdout
    with contained.workspace() as ws:  # and the host-facing file API follows no link out
        ws.run(code=f"import os; os.symlink({secret!r}, 'link'); os.symlink('/proc/1/environ', 'env')")
        for name in ("link", "env", "../" * 5 + secret.lstrip("/")):
            try:
                assert CANARY not in ws.read_file(name)
            except (ValueError, OSError):
                pass


def test_file_from_one_execution_is_gone_in_the_next(contained):
    py(contained, "open('/work/left', 'w').write('x'); open('/tmp/left', 'w').write('x')")
    res = py(contained, "import os; print(sorted(os.listdir('/work')), sorted(os.listdir('/tmp')))")
    assert res.stdout.strip() == "[] []"


# ---- network ------------------------------------------------------------------------------
@pytest.fixture
def listeners(tmp_path):
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "host.sock"))
    unix.listen(8)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0flywheel-escape-" + secrets.token_hex(4))
    abstract.listen(8)
    socks = {"tcp": tcp, "udp": udp, "unix": unix, "abstract": abstract}
    for s in socks.values():
        s.setblocking(False)
    yield socks, tmp_path / "host.sock"
    for s in socks.values():
        s.close()


def nothing_arrived(socks) -> bool:
    for kind, s in socks.items():
        try:
            s.recvfrom(100) if kind == "udp" else s.accept()
            return False
        except BlockingIOError:
            pass
    return True


def test_tcp_to_a_host_listener(contained, listeners):
    socks, _ = listeners
    port = socks["tcp"].getsockname()[1]
    code = f"""
import socket
for host in ['127.0.0.1', 'localhost', '10.0.2.2', '172.17.0.1', '::1']:
    try:
        socket.create_connection((host, {port}), timeout=0.5); print('CONNECTED', host)
    except OSError:
        pass
print('interfaces', [n for _, n in socket.if_nameindex()])
"""
    res = py(contained, code)
    assert "CONNECTED" not in res.stdout and "interfaces" in res.stdout and nothing_arrived(socks)
    assert "eth" not in res.stdout


def test_udp_to_a_host_listener(contained, listeners):
    socks, _ = listeners
    port = socks["udp"].getsockname()[1]
    res = py(contained, f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(20):
    try:
        s.sendto(b'escape', ('127.0.0.1', {port}))
    except OSError as e:
        print(type(e).__name__)
print('sent')
""")
    time.sleep(0.2)
    assert "sent" in res.stdout and nothing_arrived(socks)


def test_unix_sockets_to_the_host(contained, listeners):
    socks, path = listeners
    abstract_name = socks["abstract"].getsockname()
    docker_sock = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    res = py(contained, f"""
import socket
for addr in [{str(path)!r}, {abstract_name!r}, {docker_sock!r}, '/var/run/docker.sock', '/run/containerd/containerd.sock']:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(addr); print('CONNECTED', repr(addr))
    except OSError as e:
        print('refused', type(e).__name__)
""")
    assert "CONNECTED" not in res.stdout and res.stdout.count("refused") == 5 and nothing_arrived(socks)


# ---- environment and credentials ------------------------------------------------------------
def test_host_environment_and_credentials(contained):
    res = py(contained, """
import os, glob
print(dict(os.environ))
for p in ['/proc/self/environ', '/proc/1/environ', *glob.glob('/proc/*/environ')]:
    try:
        print(open(p, 'rb').read())
    except OSError:
        pass
for p in ['~/.aws/credentials', '~/.docker/config.json', '~/.ssh/id_rsa', '/run/secrets']:
    print(p, os.path.exists(os.path.expanduser(p)))
""")
    assert res.exit_code == 0 and CANARY not in res.stdout and "AWS_SECRET" not in res.stdout
    assert "FLYWHEEL_CANARY" not in res.stdout and "True" not in res.stdout


def test_proc_snooping_sees_no_host_process(contained):
    res = py(contained, """
import os
pids = [p for p in os.listdir('/proc') if p.isdigit()]
cmds = []
for p in pids:
    try:
        cmds.append(open(f'/proc/{p}/cmdline', 'rb').read())
    except OSError:
        pass
print(len(pids), any(b'pytest' in c for c in cmds))
try:
    print(len(open('/proc/1/mem', 'rb').read(16)), 'MEM READ')
except OSError:
    print('mem denied')
""")
    count, saw_host = res.stdout.split()[:2]
    assert int(count) <= 2 and saw_host == "False" and "mem denied" in res.stdout


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
