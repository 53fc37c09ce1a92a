"""Start-up steps of the sandbox worker (part of its program: see worker.py).

Sent to the sandbox ahead of worker.py as one program (protocol.WORKER_SOURCE); standard
library only. Each step here makes every later fork cheaper; none of them is needed
for safety except that the code mappings are read-only again after
share_code_mappings().
"""

import json
import os
import sys


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


def load_libraries():
    """sandbox.libraries on the path, and the domains' warm-up snippets run now, once, so
    that every child finds their libraries imported and their caches filled (math-verify:
    0.55 s to import, 50 ms for its first verify, 1.5 ms after). The snippets are the
    host's own code (Environment.sandbox_warmup), never a model's. The host names both in
    the environment (bwrap.py, docker_backend.py); they leave it here."""
    lib = os.environ.pop("FLYWHEEL_LIB", "")
    if lib and os.path.isdir(lib):
        sys.path.append(lib)
    for snippet in json.loads(os.environ.pop("FLYWHEEL_WARMUP", "") or "[]"):
        try:
            exec(compile(snippet, "<warm-up>", "exec"), {"__name__": "warmup"})
        except Exception:  # a missing library shows up in the job that needs it, with its error
            pass


def warm_up():
    """Run, before any fork, what most children run first (the verification harnesses'
    json and compile): the interpreter's lazily filled caches (the type attribute cache,
    the specialised bytecode of json's Python code) are then filled once here and shared,
    instead of written, page by page, by every child (measured: ~8% more verifications/s)."""
    for _ in range(64):
        json.loads(json.dumps({"a": [1, 2.5, "x", None, True], "b": {"c": "d"}}))
        json.loads(b'{"a": [1, 2.5, "x"]}')
        json.JSONEncoder(sort_keys=True).encode({"b": 1, "a": [1, "x"]})
        compile("x = 1\ndef f(*a):\n    return a\n", "<warm>", "exec")
