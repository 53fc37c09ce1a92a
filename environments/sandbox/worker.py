"""The fork-server that runs INSIDE a sandbox (a bwrap namespace or a container).

Standard library only, and it must run under the sandbox's own /usr/bin/python3: the
host sends the source on the command line (`python3 -I -c BOOT SOURCE`, see protocol.py),
so neither the host's interpreter, packages nor environment ever enter the sandbox.
SOURCE is one program in four files: worker_startup.py, worker_workspace.py (put, wipe,
snapshot, restore), worker_child.py (what a forked child runs), then this one, which
uses their names and starts the worker.

Protocol: on stdin/stdout, each message is a 4-byte big-endian length followed by that
many bytes. A request is a `marshal`-encoded dict (the host is trusted: only the worker
decodes marshal). A reply is JSON, except the result of `run`: `R`, a fixed struct
(exit code, flags, duration, the two lengths), then stdout's and stderr's raw bytes, so
neither side encodes or escapes the output (the host decodes it as UTF-8, replacing
what is not). One request, one reply, in order. Requests (`op`):

- `run`: argv or code, stdin, limits -> exit_code, stdout, stderr, duration_s,
  timed_out, truncated. A child is forked per execution: new session, rlimits, cwd
  /work, fds 0/1/2 only. When argv is a plain `python [-I|-S|-u|-B|-E|-s] -c CODE` or
  `python ... SCRIPT.py` the child does not exec a new interpreter: it runs the code
  with `exec()` in a fresh namespace. That is the fast path (~1 ms instead of ~20 ms
  for a new interpreter); the child shares only the stdlib modules this worker already
  imported from the sandbox's own python, and every limit is a kernel rlimit, so it
  cannot loosen them. Anything else is exec'd.
- `put` (files) / `read` (path) / `snapshot` / `reset` / `wipe` / `ping`.

Between executions: the wall clock kills the child's process group; then, because
this worker is pid 1 of its pid namespace, `kill(-1, SIGKILL)` reaches every other
process in the sandbox (detached daemons included) but never the worker itself (the
kernel exempts pid 1 from kill(-1), and drops SIGKILL sent to a namespace's init from
inside it). Orphans reparent to pid 1 and are reaped. `wipe` empties /work and /tmp.
The worker makes itself non-dumpable (PR_SET_DUMPABLE), so a child cannot ptrace it or
read its /proc entries. If the worker is not pid 1 (never the case in our backends) it
refuses `kill(-1)` and only kills the process group.

Cost: mostly the kernel's, for the fork: copying the page tables, a copy-on-write fault
for every page the child writes (and every page the worker writes between forks), the
child's teardown at exit. So the worker works out before the fork what the child needs
and leaves it installed (prepare(), install()), and writes little; see run().
"""

import gc
import json
import marshal
import os
import select
import signal
import struct
import sys
import time

if __name__ != "__main__":  # on the host (a reader, a linter): in the sandbox the four files are one program
    from flywheel.environments.sandbox.worker_child import IGNORED, child, install, prepare, task_environment
    from flywheel.environments.sandbox.worker_startup import libc, load_libraries, share_code_mappings, warm_up
    from flywheel.environments.sandbox.worker_workspace import TMP, WORK, put, restore, safe_path, take_snapshot, wipe

# A child that has written nothing wakes the worker once, at its exit, not also at its first
# write (a wake-up while the child runs costs copy-on-write faults in the worker); the pipes
# are looked at after QUIET_S, then at doubling intervals up to QUIET_MAX_S, so a child
# that fills a pipe is not left blocked for longer than that.
QUIET_S, QUIET_MAX_S = 0.004, 0.064
RUN_REPLY = struct.Struct("<cibdII")  # b"R", exit code, timed_out | truncated << 1, duration, len(out, err)
snapshot = {}


def read_msg(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    return marshal.loads(read_exact(fd, struct.unpack(">I", head)[0]))


def read_exact(fd, n):
    first = os.read(fd, min(n, 1 << 20))
    if len(first) == n or not first:  # the common case: all of it at once (or EOF)
        return first or None
    chunks, n = [first], n - len(first)
    while n:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def write_msg(fd, reply):
    """A dict as JSON, or a payload already encoded (a run's result)."""
    data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def reap_all():
    """Kill everything in the sandbox but us, then reap every zombie."""
    init = os.getpid() == 1
    while True:
        if init:  # again each time: nothing can fork past a SIGKILL, but be sure
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:  # no other process at all, not even a zombie: nothing to reap
                return
            except OSError:
                pass
        try:
            pid, _ = os.waitpid(-1, 0 if init else os.WNOHANG)
            if pid == 0:
                return
        except ChildProcessError:
            return


def run(req, keep):
    rlimits, how = prepare(req, keep)
    lim = req["limits"]
    cap = int(lim["output_bytes"])
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, req.get("stdin", "").encode())
    os.lseek(stdin_fd, 0, 0)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wall = float(lim["wall_s"])
    start = time.monotonic()
    if how[0] == "python":
        install(how, keep)
    pid = os.fork()
    if pid == 0:
        child(rlimits, how, stdin_fd, out_w, err_w)
    # While the child runs, every page this process writes is copied: wait first, tidy up after.
    pidfd = os.pidfd_open(pid)
    status = os.waitpid(pid, 0)[1] if select.select([pidfd], [], [], min(wall, QUIET_S))[0] else None
    for fd in (stdin_fd, out_w, err_w):
        os.close(fd)
    bufs = {out_r: bytearray(), err_r: bytearray()}
    truncated, timed_out = False, False
    deadline = start + wall
    open_fds = [out_r, err_r, pidfd]
    quiet = 2 * QUIET_S
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.kill(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
            break
        if quiet:  # nothing written yet? then sleep on its exit alone, and look at the pipes now and then
            ready = select.select(open_fds, [], [], 0)[0]
            if ready:
                quiet = 0  # it writes: from now on every pipe wakes us
            else:
                ready = select.select([pidfd], [], [], min(left, quiet))[0]
                quiet = min(2 * quiet, QUIET_MAX_S)
        else:
            ready = select.select(open_fds, [], [], left)[0]
        for fd in ready:
            if fd == pidfd:
                status = os.waitpid(pid, 0)[1]
                continue
            truncated |= drain(fd, bufs[fd], cap, open_fds)
    duration = time.monotonic() - start
    os.close(pidfd)
    reap_all()  # leftovers die now, so the pipes reach EOF
    for fd in (out_r, err_r):
        while fd in open_fds:
            truncated |= drain(fd, bufs[fd], cap, open_fds)
        os.close(fd)
    out, err = bufs[out_r], bufs[err_r]
    code = os.waitstatus_to_exitcode(status)
    head = RUN_REPLY.pack(b"R", code, timed_out | truncated << 1, duration, len(out), len(err))
    return b"".join((head, out, err))


def drain(fd, buf, cap, open_fds):
    """Read what is there; keep at most cap bytes, drop the rest (the child never blocks)."""
    try:
        b = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    if not b:
        open_fds.remove(fd)
        return False
    room = cap - len(buf)
    buf += b[:max(0, room)]
    return len(b) > room


def handle(req, keep):
    global snapshot
    op = req["op"]
    if op == "run":  # one round trip for a one-shot job: files, run, wipe
        try:
            put(req.get("files") or {})
            return run(req, keep)
        finally:
            if req.get("wipe"):
                wipe()
    if op == "put":
        put(req["files"])
    elif op == "read":
        p = safe_path(req["path"])
        with open(p, "rb") as f:
            return {"content": f.read(int(req.get("max_bytes", 1 << 20))).decode("utf-8", "replace")}
    elif op == "snapshot":
        snapshot = take_snapshot()
    elif op == "reset":
        restore(snapshot)
    elif op == "wipe":
        snapshot = []
        wipe()
    elif op != "ping":
        raise ValueError(f"unknown op {op!r}")
    # every other process this sandbox can see: none between executions, or a leak
    others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    return {"pid": os.getpid(), "others": others}


def main():
    if len(sys.argv) > 2:  # docker: the protocol comes over the unix socket the host mounted here
        import _socket  # not `socket`: its enum classes would be in every fork

        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        conn.connect(sys.argv[2])
        fd = conn.detach()
        os.dup2(fd, 0)
        os.dup2(fd, 1)
        os.close(fd)
    # Keep the protocol off fds 0/1, so that nothing else can write to the host by accident.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    libc("prctl", 4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4: not dumpable
    os.environ.pop("LD_BIND_NOW", None)  # see bwrap.py: for this process only, not the code's environment
    # A namespace's init gets only the signals it handles from inside: handle none.
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    stdio = [open(fd, "w" if fd else "r", encoding="utf-8", closefd=False,
                  errors="backslashreplace" if fd == 2 else "strict") for fd in (0, 1, 2)]
    task_environment()
    load_libraries()
    keep = {"path": list(sys.path), "compiled": {}, "rlimits": {}, "main": {}, "argv": {},
            # what the worker replaces stays referenced here, never finalized
            "replaced": (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__,
                         sys.argv, sys.path, sys.modules["__main__"])}
    # The children's std streams, installed here once so no child has to (the worker never
    # uses them: its protocol has fds of its own, and it prints nothing, so their buffers
    # stay empty for every child).
    sys.stdin, sys.stdout, sys.stderr = stdio
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = stdio
    # -I ignores PYTHONDONTWRITEBYTECODE: say it here, or forked children write .pyc files
    # into /work, whose second-granular mtimes then hide an edit of the same size.
    sys.dont_write_bytecode = True
    warm_up()
    gc.freeze()
    libc("malloc_trim", 0)  # what compiling this file left free: every fork would copy it
    share_code_mappings()
    os.umask(0o022)
    for d in (WORK, TMP):
        os.chmod(d, 0o700)  # this uid only
    write_msg(proto_out, {"ready": True, "pid": os.getpid()})
    while True:
        req = read_msg(proto_in)
        if req is None:
            reap_all()
            return
        try:
            reply = handle(req, keep)
        except Exception as e:
            reply = {"fail": f"{type(e).__name__}: {e}"}
        write_msg(proto_out, reply)


if __name__ == "__main__":
    main()
