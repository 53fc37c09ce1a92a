"""The fork-server that runs INSIDE a sandbox (a bwrap namespace or a container).

Standard library only, and it must run under the sandbox's own /usr/bin/python3: the
host sends this file's source on the command line (`python3 -I -c BOOT SOURCE`, see
pool.py), so neither the host's interpreter, packages nor environment ever enter the
sandbox.

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

Cost: what a run costs is mostly the kernel's, for the fork: copying the worker's page
tables, a copy-on-write fault for every page the child or the worker writes while both
exist, tearing the child's pages down at its exit. So the worker keeps its heap small,
works out before the fork what the child needs, and writes as little as it can while a
child runs; see prepare() and run().
"""

import _signal
import gc
import json
import marshal
import os
import select
import signal
import stat
import struct
import sys
import time
import resource

WORK, TMP = "/work", "/tmp"
FAST_FLAGS = {"-I", "-S", "-u", "-B", "-E", "-s"}
RLIMITS = {"memory_mb": ("RLIMIT_AS", 1 << 20), "cpu_s": ("RLIMIT_CPU", 1),
           "max_procs": ("RLIMIT_NPROC", 1), "file_size_mb": ("RLIMIT_FSIZE", 1 << 20)}
SNAPSHOT_MAX = 64 << 20
# A child that has written nothing wakes the worker once, at its exit, not also at its first
# write (a wake-up while the child runs costs copy-on-write faults in the worker); the pipes
# are looked at after QUIET_S, then at doubling intervals up to QUIET_MAX_S, so a child
# that fills a pipe is not left blocked for longer than that.
QUIET_S, QUIET_MAX_S = 0.004, 0.064
RUN_REPLY = struct.Struct("<cibdII")  # b"R", exit code, timed_out | truncated << 1, duration, len(out, err)
IGNORED = tuple(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                                 signal.SIGUSR2, signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN,
                                 signal.SIGTTOU))
EXEC_ENV = {"PATH": "/usr/bin:/bin", "HOME": WORK, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
snapshot = {}


def libc(name, *args):
    try:
        import ctypes

        getattr(ctypes.CDLL(None), name)(*args)
    except Exception:
        pass


def share_code_mappings():
    """Have every fork copy the page-table entries of the interpreter's and libc's code and
    read-only data, instead of every child faulting them in again (~60 faults a run). The
    kernel copies a private file mapping's entries at fork only once the mapping has an
    anon_vma, which its first copy-on-write gives it: so each such mapping is made writable
    for a moment, one byte is written with its own value, and the mapping is made read-only
    again. Only here, at start-up, before anything else runs in the sandbox. Where the
    kernel refuses to make code writable, nothing changes; if it then refused to make it
    read-only again, the worker stops (it never runs code with writable code pages)."""
    try:
        import ctypes

        mprotect = ctypes.CDLL(None, use_errno=True).mprotect
        mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps") as f:
            maps = [line.split() for line in f]
    except Exception:
        return
    mine = os.path.realpath(sys.executable)
    for p in maps:
        if len(p) < 6 or p[1] not in ("r-xp", "r--p") or not (p[5] == mine or "/libc.so" in p[5]):
            continue
        lo, hi = (int(x, 16) for x in p[0].split("-"))
        prot = 5 if p[1] == "r-xp" else 1  # PROT_READ | PROT_EXEC, or PROT_READ
        if mprotect(lo, hi - lo, prot | 2) != 0:  # | PROT_WRITE
            continue
        byte = ctypes.c_char.from_address(lo)
        byte.value = byte.value
        if mprotect(lo, hi - lo, prot) != 0:
            raise SystemExit("sandbox worker: cannot make its code read-only again")


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


def fast_path(argv):
    """(code, filename, argv0, isolated) when argv is a plain python invocation."""
    if not argv or argv[0] != "python":
        return None
    i, flags = 1, set()
    while i < len(argv) and argv[i] in FAST_FLAGS:
        flags.add(argv[i])
        i += 1
    if i < len(argv) and argv[i] == "-c" and i + 1 < len(argv):
        return argv[i + 1], "<string>", ["-c", *argv[i + 2:]], "-I" in flags
    if i < len(argv) and argv[i].endswith(".py") and not argv[i].startswith("-"):
        return None, argv[i], argv[i:], "-I" in flags
    return None


def prepare(req, keep):
    """What the child needs, worked out in the worker before the fork: a child pays a
    copy-on-write fault for every page it writes, the worker only a cheap one, so the
    child only applies what is computed here. (A `SCRIPT.py` is read in the child: it
    is the code's own file, which the worker never opens.)"""
    lim = req["limits"]
    key = tuple(lim[k] for k in RLIMITS)
    rlimits = keep["rlimits"].get(key)
    if rlimits is None:  # the same few limits every time: worked out once
        rlimits = [(getattr(resource, name), int(lim[k] * unit)) for k, (name, unit) in RLIMITS.items()]
        rlimits += [(resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_CORE, 0)]
        keep["rlimits"] = {key: rlimits} if len(keep["rlimits"]) >= 16 else {**keep["rlimits"], key: rlimits}
    argv = req.get("argv") or ["python", "-c", req.get("code", "")]
    fast = fast_path(argv)
    if fast is None:
        prog = sys.executable if argv[0] == "python" else argv[0]
        return rlimits, ("exec", prog, [prog, *argv[1:]])
    precompile(req, fast, keep)
    code, filename, args, isolated = fast
    if code is not None:
        code = keep["compiled"].get(code, code)
    # sys.path and __main__ are made once and handed to every child: a child changes only
    # its own copy of them, the worker never runs code in them (so they stay pristine)
    path = keep["path"]
    if not isolated:
        here = "" if filename == "<string>" else os.path.dirname(os.path.normpath(os.path.join(WORK, filename)))
        path = [here, *path]
    main = keep["main"].get(filename)
    if main is None:
        main = type(sys)("__main__")
        main.__dict__.update({"__file__": filename, "__builtins__": __builtins__})
        if len(keep["main"]) >= 64:
            keep["main"].clear()
        keep["main"][filename] = main
    return rlimits, ("python", code, filename, args, path, main)


def child(rlimits, how, stdin_fd, out_w, err_w, keep):
    """In the forked child: never returns."""
    try:
        os.setsid()
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)  # the worker's protocol pipes above all
        for sig in IGNORED:
            _signal.signal(sig, _signal.SIG_DFL)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # as in a fresh python
        os.chdir(WORK)
        for res, v in rlimits:
            resource.setrlimit(res, (v, v))
        if how[0] == "exec":
            _, prog, argv = how
            _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)  # as a fresh process would have it
            try:
                os.execvpe(prog, argv, EXEC_ENV)
            except OSError as e:
                os.write(2, f"exec failed: {argv[0]}: {e}\n".encode())
                os._exit(127)
        _, code, filename, sys.argv, sys.path, main = how
        if code is None:
            with open(filename, "rb") as f:
                code = f.read()
        sys.stdin, sys.stdout, sys.stderr = keep["stdio"]  # made unused in the worker: empty buffers
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.modules["__main__"] = main
        status = 0
        try:
            if isinstance(code, (str, bytes)):
                code = compile(code, filename, "exec")
            exec(code, main.__dict__)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException as e:
            import traceback

            # from the code's own frames on, as python prints it (not this function's)
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
            status = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(status & 0xFF)
    except BaseException as e:
        try:
            os.write(2, f"sandbox child setup failed: {e}\n".encode())
        finally:
            os._exit(126)


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


def precompile(req, fast, keep):
    """Compile `-c` code in the worker, where the code object stays for the next
    executions (a verifier's harness is the same every time); children inherit it by
    fork. A compile error is left for the child to raise, as python would. Only when
    the host asks (`cache`: one-shot jobs, whose `-c` is the environment's harness): a
    later child could read the cache, so model-written commands never enter it."""
    cache = keep["compiled"]
    if not req.get("cache") or fast[0] is None or fast[0] in cache or len(fast[0]) >= 1 << 16:
        return
    try:
        code = compile(fast[0], "<string>", "exec", dont_inherit=True)
    except BaseException:
        return
    if len(cache) >= 64:
        cache.pop(next(iter(cache)))
    cache[fast[0]] = code
    gc.freeze()  # what the worker holds now is never scanned (nor copied) by a child's gc


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
    pid = os.fork()
    if pid == 0:
        child(rlimits, how, stdin_fd, out_w, err_w, keep)
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


def empty(path):
    """Remove everything under path, whatever modes the code left behind."""
    for entry in os.scandir(path):
        p = entry.path
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(p, 0o700)
                empty(p)
                os.rmdir(p)
            else:
                os.unlink(p)
        except OSError:
            pass


def wipe():
    empty(WORK)
    empty(TMP)


def safe_path(name):
    p = os.path.normpath(os.path.join(WORK, name))
    if not p.startswith(WORK + "/"):
        raise ValueError(f"file name {name!r} escapes the workspace")
    return p


def put(files):
    for name, content in files.items():
        p = safe_path(name)
        if os.path.dirname(p) != WORK:
            os.makedirs(os.path.dirname(p), exist_ok=True)
        if os.path.islink(p):
            os.unlink(p)
        write_file(p, content.encode(), 0o666)


def write_file(path, data, mode):
    """As open(path, "w").write(...), in plain syscalls (no io objects to build)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def take_snapshot():
    """Every regular file, dir and symlink under /work, in memory, so reset is a rewrite."""
    snap, total = [], 0
    for root, dirs, files in os.walk(WORK):
        for d in dirs:
            p = os.path.join(root, d)
            snap.append((p, "l" if os.path.islink(p) else "d", os.readlink(p) if os.path.islink(p) else None,
                         stat.S_IMODE(os.lstat(p).st_mode)))
        for name in files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                snap.append((p, "l", os.readlink(p), 0))
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > SNAPSHOT_MAX:
                    raise ValueError("workspace too large to snapshot")
                with open(p, "rb") as f:
                    snap.append((p, "f", f.read(), stat.S_IMODE(st.st_mode)))
    return snap


def restore(snap):
    wipe()
    for p, kind, data, mode in snap:
        if kind == "d":
            os.makedirs(p, exist_ok=True)
            os.chmod(p, mode)
        elif kind == "l":
            os.symlink(data, p)
        else:
            write_file(p, data, mode)


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
    keep = {"path": list(sys.path), "compiled": {}, "stdio": stdio, "rlimits": {}, "main": {},
            # what a child replaces stays referenced here: if the child dropped the last
            # reference (the interpreter's own std streams, argv, path, __main__), every
            # child would finalize and free them, writing to their pages (copy-on-write)
            "replaced": (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__,
                         sys.argv, sys.path, sys.modules["__main__"])}
    # -I ignores PYTHONDONTWRITEBYTECODE: say it here, or forked children write .pyc files
    # into /work, whose second-granular mtimes then hide an edit of the same size.
    sys.dont_write_bytecode = True
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
