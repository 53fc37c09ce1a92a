"""The host's end of the sandbox worker's protocol: the worker's program and command
line, the byte pipe a backend hands back (`Transport`), and `Worker`, which frames
requests (marshal, host to worker only) and decodes replies (JSON, or a run's result
as a struct and raw bytes: see worker.py).
"""

from __future__ import annotations

import json
import marshal
import struct
import time
from abc import ABC, abstractmethod
from pathlib import Path

START_TIMEOUT_S = 60.0
# One program in four files: start-up steps, workspace operations, the child's side, then
# the worker itself, whose last lines start it.
WORKER_FILES = ("worker_startup.py", "worker_workspace.py", "worker_child.py", "worker.py")
WORKER_SOURCE = "\n\n".join((Path(__file__).parent / name).read_text() for name in WORKER_FILES)
# The worker starts as `python -I -c BOOT SOURCE`: BOOT compiles SOURCE with compile(), which
# frees the parser's memory (~1.3 MB) before the worker runs. Given as -c's own program,
# SOURCE's parse would stay allocated as long as that program runs (the worker's whole
# life), and every fork would copy it.
WORKER_BOOT = "import sys; exec(compile(sys.argv[1], 'sandbox-worker', 'exec'))"


def worker_command(python: str) -> list[str]:
    return [python, "-I", "-c", WORKER_BOOT, WORKER_SOURCE]


RUN_REPLY = struct.Struct("<cibdII")  # as in worker.py: b"R", exit code, flags, duration, len(out), len(err)


class WorkerDied(Exception):
    pass


class Transport(ABC):
    """A byte pipe to one worker's stdin/stdout."""

    @abstractmethod
    def send(self, data: bytes) -> None: ...

    @abstractmethod
    def recv(self, n: int, deadline: float) -> bytes:
        """Exactly n bytes; raise WorkerDied on EOF or past the deadline."""

    @abstractmethod
    def kill(self) -> None:
        """Kill the whole sandbox and release what it held (idempotent)."""

    @abstractmethod
    def fileno(self) -> int:
        """What to select() on for the worker's replies."""

    def buffered(self) -> bool:
        """Whether bytes already read ahead wait here (select() on fileno() cannot see them)."""
        return False


class Worker:
    def __init__(self, transport: Transport):
        self.transport = transport
        self.uses = 0
        self.dead = False
        hello = self._recv(time.monotonic() + START_TIMEOUT_S)
        if not hello.get("ready"):
            raise WorkerDied(f"worker did not start: {hello}")
        self.pid = hello["pid"]

    def _recv(self, deadline: float) -> dict:
        (n,) = struct.unpack(">I", self.transport.recv(4, deadline))
        data = self.transport.recv(n, deadline)
        return decode_run(data) if data[:1] == b"R" else json.loads(data)

    def call(self, req: dict, timeout: float) -> dict:
        self.send(req)
        return self.reply(time.monotonic() + timeout)

    def send(self, req: dict) -> None:
        if self.dead:
            raise WorkerDied("worker is dead")
        try:
            data = marshal.dumps(req)
            self.transport.send(struct.pack(">I", len(data)) + data)
        except Exception as exc:
            self.kill()
            raise WorkerDied(f"{type(exc).__name__}: {exc}") from exc

    def reply(self, deadline: float) -> dict:
        try:
            reply = self._recv(deadline)
        except Exception as exc:
            self.kill()
            raise WorkerDied(f"{type(exc).__name__}: {exc}") from exc
        if "fail" in reply:
            raise ValueError(reply["fail"])  # a bad request (e.g. a path escaping /work)
        return reply

    def kill(self) -> None:
        self.dead = True
        self.transport.kill()


def decode_run(data: bytes) -> dict:
    """A run's result: a fixed struct, then stdout's and stderr's bytes (decoded here).
    Only struct and slicing touch what the sandbox sent: never marshal or pickle."""
    _, code, flags, duration, n_out, n_err = RUN_REPLY.unpack_from(data)
    start = RUN_REPLY.size
    if start + n_out + n_err != len(data):
        raise ValueError("malformed run reply")
    return {"exit_code": code, "stdout": data[start:start + n_out].decode("utf-8", "replace"),
            "stderr": data[start + n_out:].decode("utf-8", "replace"), "duration_s": duration,
            "timed_out": bool(flags & 1), "truncated": bool(flags & 2)}  # fmt: skip
