"""What a forked child runs, and what the worker works out for it before the fork (part
of the sandbox worker's program: see worker.py).

Sent to the sandbox ahead of worker.py as one program (protocol.WORKER_SOURCE); standard
library only.
"""

import _signal
import gc
import json
import os
import resource
import signal
import sys

if __name__ != "__main__":  # on the host (a reader, a linter): in the sandbox the files are one program
    from flywheel.environments.sandbox.worker_workspace import WORK

FAST_FLAGS = {"-I", "-S", "-u", "-B", "-E", "-s"}
RLIMITS = {"memory_mb": ("RLIMIT_AS", 1 << 20), "cpu_s": ("RLIMIT_CPU", 1),
           "max_procs": ("RLIMIT_NPROC", 1), "file_size_mb": ("RLIMIT_FSIZE", 1 << 20)}
# signals the worker ignores (as a namespace's init it handles none) and a child resets
IGNORED = tuple(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                                 signal.SIGUSR2, signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN,
                                 signal.SIGTTOU))
EXEC_ENV = {"PATH": "/usr/bin:/bin", "HOME": WORK, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


def task_environment():
    """A task image's own variables (its Dockerfile's ENV: environments/sources/harbor_docker.py),
    which the host names in FLYWHEEL_ENV: every child gets them over EXEC_ENV's, exec'd or
    forked. No backend sets it for its own image, so there this changes nothing."""
    extra = json.loads(os.environ.pop("FLYWHEEL_ENV", "") or "{}")
    EXEC_ENV.update(extra)
    os.environ.update(extra)


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
    if len(keep["argv"]) >= 64:
        keep["argv"].clear()
    args = keep["argv"].setdefault(tuple(args), args)  # the same list every time: see install()
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


def install(how, keep):
    """Make the worker's own sys.argv, sys.path and __main__ what the next child needs, so
    the child inherits them instead of assigning them: each object a child touches is a
    page it copies, and these rarely change between runs. The worker never reads them
    after start-up; sys.path only ever takes the isolated path here (a non-isolated one
    starts with the code's directory, "" or under /work: the worker must never import
    from where the code writes)."""
    _, _, _, args, path, main = how
    if sys.argv is not args:
        sys.argv = args
    if path is keep["path"] and sys.path is not path:
        sys.path = path
    if sys.modules["__main__"] is not main:
        sys.modules["__main__"] = main


def child(rlimits, how, stdin_fd, out_w, err_w):
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
        _, code, filename, args, path, main = how
        if sys.path is not path:  # install() left argv, the isolated path and __main__ in place
            sys.path = path
        if code is None:
            with open(filename, "rb") as f:
                code = f.read()
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
