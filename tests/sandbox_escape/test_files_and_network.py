"""The escape suite, part 1: host files, network, environment and credentials. Each
hostile program runs on both backends (real bwrap, real dockerd); every test asserts the
specific containment (a planted host secret is not read, a host listener gets no
connection, a canary is absent), and the `contained` fixture then checks that the pool
still serves with nothing left behind. Part 2: test_processes.py."""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
import time

import pytest

from tests.sandbox_fixtures import CANARY, LIMITS, py


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
    # every file read, the sandbox's libraries too (~320 MB with reasoning-gym's numpy and
    # matplotlib): more than the suite's 3 s on a busy 2-core machine
    res = py(contained, code, limits=dataclasses.replace(LIMITS, wall_s=30, cpu_s=30))
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
        # a file the host puts where the code left a link replaces the link, never writes through it
        ws.run(code="import os; open('/tmp/target', 'w').write('kept'); os.symlink('/tmp/target', 'solution.py')")
        ws.put({"solution.py": "new"})
        res = ws.run(code="import os; print(os.path.islink('solution.py'), open('solution.py').read(), "
                          "open('/tmp/target').read())")
        assert res.stdout.split() == ["False", "new", "kept"]


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


def test_the_workers_own_channel(contained):
    """The protocol between host and worker is out of the code's reach: no inherited
    socket or pipe beyond its own std streams, the worker's fds (pid 1, not dumpable) are
    closed to it, and the docker worker's socket admits nobody after the worker."""
    res = py(contained, """
import os, socket, stat
for fd in range(3, 1024):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        continue
    print('OPEN', fd, stat.S_ISSOCK(mode), stat.S_ISFIFO(mode))
try:
    print('PEEKED', os.listdir('/proc/1/fd'))
except OSError as e:
    print('denied', type(e).__name__)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('/flywheel/w'); s.sendall(b'x' * 64); print('CONNECTED')
except OSError as e:
    print('refused', type(e).__name__)
""")
    assert "OPEN" not in res.stdout and "PEEKED" not in res.stdout and "CONNECTED" not in res.stdout, res.stdout
    assert res.stdout.count("denied") == 1 and res.stdout.count("refused") == 1, res.stdout + res.stderr


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
