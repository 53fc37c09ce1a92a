"""The host side of the warm pool shared by the bwrap and docker backends.

A backend only knows how to start one sandbox running `worker.py` and hand back a
`Transport` (bytes in, bytes out, kill; protocol.py). Everything else lives here: the
pool (at most `concurrency` workers, warm, reused), recycling after N executions,
respawning dead workers, and workspaces held across several commands. `map()` drives
its workers from the calling thread alone, two small jobs queued on each (the worker
starts the second the moment it has answered the first).

Failure semantics, on purpose: when a worker dies or stops answering in the middle of
an execution (the host killed it, the kernel's OOM killer took it, the container
vanished) the execution returns an `ExecResult` with `error` set, never a crash
result: we cannot tell whether the code or the machine is to blame, and `error` is
what tasks/score.py retries once before recording the `error` verdict. The dead
worker is killed for good and a fresh one is started on the next acquire. The host
waits `wall_s + GRACE_S` at most: a worker that overruns that is killed as hung.
"""

from __future__ import annotations

import collections
import dataclasses
import select
import threading
import time
from abc import abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor, wait

from flywheel.environments.sandbox.base import ExecResult, Job, Limits, Sandbox, Workspace
from flywheel.environments.sandbox.protocol import Transport, Worker, WorkerDied

GRACE_S = 10.0  # for the worker's own bookkeeping beyond the code's wall time

# bwrap's --die-with-parent is tied to the *thread* that spawned it: spawn every worker
# from one thread that lives as long as the process, never from a short-lived map() thread.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")
_reaper = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandbox-reaper")  # worn workers' kills


def _in_spawner() -> bool:
    return threading.current_thread().name.startswith("sandbox-spawner")


PIPELINE = 2  # jobs held by one worker in map(): the running one and the next
PIPELINE_BYTES = 16 << 10  # a job is queued behind another only when both are this small


def _wire_size(job: Job) -> int:
    """An upper bound on the job's request in bytes (4 per character, as UTF-8 at worst)."""
    chars = len(job.stdin) + sum(map(len, job.argv)) + sum(len(k) + len(v) for k, v in job.files.items())
    return 512 + 4 * chars


WORKER_MB = 64  # a worker's own memory, in its memory budget (the code's limit + its tmpfs mounts + this)
WARMUP_MB = 192  # more for a worker that imported libraries before forking (sympy is ~80 MB)


def worker_mb(warmup) -> int:
    return WORKER_MB + (WARMUP_MB if warmup else 0)


class _Lane:
    """A worker in map(): the jobs sent to it, in order (the first is running)."""

    __slots__ = ("worker", "queue", "since", "deadline")

    def __init__(self, worker: Worker):
        self.worker = worker
        self.queue: collections.deque[tuple[int, float, bool]] = collections.deque()  # job, wall+grace, small
        self.since = self.deadline = 0.0  # when the running job started, and its deadline


class PoolWorkspace(Workspace):
    """A workspace on one worker. If that worker dies, the next call starts over on a
    fresh worker from the files given at acquire (later state is lost; `lost` counts it)."""

    def __init__(self, sandbox: "PoolSandbox", files: dict[str, str]):
        self.sandbox, self.files, self.lost = sandbox, dict(files), 0
        self.worker: Worker | None = None
        self._attach()

    def _attach(self) -> None:
        self.worker = self.sandbox._acquire()
        try:
            self.worker.call({"op": "put", "files": self.files}, GRACE_S)
            self.worker.call({"op": "snapshot"}, GRACE_S)
        except Exception:
            self.sandbox._release(self.worker, wipe=True)
            self.worker = None
            raise

    def _live(self) -> Worker:
        if self.worker is None:
            raise RuntimeError("workspace was released")
        if self.worker.dead:
            self.sandbox._release(self.worker, wipe=False)
            self.lost += 1
            self._attach()
        return self.worker

    def run(self, argv=None, *, code=None, stdin="", limits: Limits | None = None) -> ExecResult:
        return self.sandbox._run_on(self._live(), argv, code, stdin, limits or self.sandbox.limits, {}, False)

    def put(self, files: dict[str, str]) -> None:
        self._live().call({"op": "put", "files": files}, GRACE_S)

    def read_file(self, path: str, max_bytes: int = 1 << 20) -> str:
        return self._live().call({"op": "read", "path": path, "max_bytes": max_bytes}, GRACE_S)["content"]

    def snapshot(self) -> None:
        self._live().call({"op": "snapshot"}, GRACE_S)

    def reset(self) -> None:
        self._live().call({"op": "reset"}, GRACE_S)

    def release(self) -> None:
        if self.worker is not None:
            self.sandbox._release(self.worker, wipe=True)
            self.worker = None


class PoolSandbox(Sandbox):
    """A Sandbox backed by warm workers. Subclasses implement `_spawn() -> Transport`."""

    def __init__(self, limits: Limits, concurrency: int = 4, python: str = "/usr/bin/python3",
                 recycle_after: int = 0, libraries: str | None = None, warmup: tuple[str, ...] = ()):
        super().__init__(limits, concurrency, python, libraries, warmup)
        self.recycle_after = recycle_after  # 0: never
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a replacement came (or failed to)
        self._warming = 0  # replacements for worn workers being started in the background
        self._background: set[Future] = set()  # those, and the worn workers being killed
        self._slots = threading.BoundedSemaphore(max(1, concurrency))
        self._all: set[Worker] = set()
        self._closed = False
        self.spawned = 0  # how many workers were ever started (respawns show here)
        self._wire_cache: dict[Limits, dict] = {}
        self.grace_s = GRACE_S

    @abstractmethod
    def _spawn(self) -> Transport: ...

    def _new_worker(self) -> Worker:
        transport = self._spawn() if _in_spawner() else _spawner.submit(self._spawn).result()
        try:
            worker = Worker(transport)
        except BaseException:
            transport.kill()
            raise
        with self._lock:
            self.spawned += 1
            self._all.add(worker)
        return worker

    def _acquire(self, blocking: bool = True) -> Worker | None:
        """An idle or new worker; None when not blocking and every slot is taken."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if not self._slots.acquire(blocking):
            return None
        try:
            with self._lock:
                while True:
                    while self._idle:
                        worker = self._idle.pop()
                        if not worker.dead:
                            return worker
                        self._all.discard(worker)
                    if not self._warming:
                        break
                    if not blocking:  # map() serves its other workers meanwhile
                        self._slots.release()
                        return None
                    self._changed.wait()  # a replacement is on its way: no second start
            return self._new_worker()
        except BaseException:
            self._slots.release()
            raise

    def _release(self, worker: Worker, wipe: bool) -> None:
        try:
            if not worker.dead and wipe:
                try:
                    worker.call({"op": "wipe"}, GRACE_S)
                except Exception:
                    worker.kill()
            if worker.dead or self._closed:
                worker.kill()
                with self._lock:
                    self._all.discard(worker)
            elif self.recycle_after and worker.uses >= self.recycle_after:
                self._recycle(worker)
            else:
                with self._lock:
                    self._idle.append(worker)
        finally:
            self._slots.release()

    def _recycle(self, worker: Worker) -> None:
        """Retire a worn worker and start its replacement, both in the background: a
        container's removal and start take ~0.2 s, and map() drives every worker from one
        thread, so doing them there stalled all of them (measured, docker pool recycling
        every 1,000 executions, c=2: 969 verifications/s before, 1,091/s after)."""
        with self._lock:
            self._all.discard(worker)
            self._warming += 1
        self._track(_reaper.submit(worker.kill))
        self._track(_spawner.submit(self._replace))

    def _replace(self) -> None:
        worker = None
        try:
            if not self._closed:
                worker = self._new_worker()
        except Exception:  # noqa: BLE001  the next _acquire starts one itself and reports why not
            pass
        finally:
            with self._lock:
                self._warming -= 1
                if worker is not None and not self._closed:
                    self._idle.append(worker)
                    worker = None
                self._changed.notify_all()
            if worker is not None:
                worker.kill()

    def _track(self, future: Future) -> None:
        with self._lock:
            self._background.add(future)
        future.add_done_callback(lambda f: self._background.discard(f))

    def _wire_limits(self, limits: Limits) -> dict:
        """The limits as the worker applies them (a backend may enforce one differently)."""
        return dataclasses.asdict(limits)

    def _wire_limits_cached(self, limits: Limits) -> dict:
        wire = self._wire_cache.get(limits)  # Limits is frozen: one encoding per distinct value
        if wire is None:
            if len(self._wire_cache) >= 64:
                self._wire_cache.clear()
            wire = self._wire_cache[limits] = self._wire_limits(limits)
        return wire

    def _run_on(self, worker, argv, code, stdin, limits: Limits, files, wipe) -> ExecResult:
        start, deadline, failed = self._send_run(worker, argv, code, stdin, limits, files, wipe)
        return failed or self._run_reply(worker, start, deadline)

    def _send_run(self, worker, argv, code, stdin, limits: Limits, files, wipe):
        """(start, deadline, None), or (.., .., the error result) when the worker is gone."""
        start = time.monotonic()
        argv = list(argv) if argv is not None else None
        # one-shot jobs (wipe) carry the environment's harness as `-c`: the worker may keep it compiled
        req = {"op": "run", "argv": argv, "code": code, "stdin": stdin,
               "limits": self._wire_limits_cached(limits), "files": files, "wipe": wipe, "cache": wipe}  # fmt: skip
        worker.uses += 1
        try:
            worker.send(req)
        except WorkerDied as exc:
            return start, start, ExecResult(None, "", "", 0.0, error=f"sandbox worker died: {exc}")
        return start, start + limits.wall_s + self.grace_s, None

    def _run_reply(self, worker, start: float, deadline: float) -> ExecResult:
        try:
            reply = worker.reply(deadline)
        except WorkerDied as exc:
            return ExecResult(None, "", "", time.monotonic() - start, error=f"sandbox worker died: {exc}")
        except ValueError as exc:
            return ExecResult(None, "", "", time.monotonic() - start, error=str(exc))
        return ExecResult(**reply)

    def run(self, job: Job) -> ExecResult:
        try:
            worker = self._acquire()
        except Exception as exc:
            return ExecResult(None, "", "", 0.0, error=f"sandbox unavailable: {type(exc).__name__}: {exc}")
        try:  # files, run and wipe in one round trip: the worker wipes /work and /tmp itself
            return self._run_on(worker, job.argv, None, job.stdin, job.limits or self.limits, job.files, True)
        finally:
            self._release(worker, wipe=False)

    def map(self, jobs: list[Job]) -> list[ExecResult]:
        """Many one-shot jobs, results in job order, all driven from this one thread (no
        thread, future or lock hand-off per job). Each worker holds up to PIPELINE jobs:
        it starts the next the moment it has answered one, without waiting for this
        thread to be scheduled. A queued job has not started while the one before it
        runs, so if the worker dies, only that one gets the error: the queued ones go to
        another worker. Up to `concurrency` workers (fewer while workspaces hold slots:
        the first is waited for, more are taken as they come free)."""
        results: list[ExecResult | None] = [None] * len(jobs)
        pending = collections.deque(range(len(jobs)))
        lanes: dict[int, _Lane] = {}  # fileno -> a worker and the jobs sent to it, the running one first
        try:
            while pending or lanes:
                while pending and len(lanes) < max(1, self.concurrency):
                    try:
                        worker = self._acquire(blocking=not lanes)
                    except Exception as exc:
                        error = f"sandbox unavailable: {type(exc).__name__}: {exc}"
                        results[pending.popleft()] = ExecResult(None, "", "", 0.0, error=error)
                        continue
                    if worker is None:
                        break
                    lane = _Lane(worker)
                    self._queue(lane, pending.popleft(), jobs, results)
                    if lane.queue:
                        lanes[worker.transport.fileno()] = lane
                    else:
                        self._release(worker, wipe=False)
                for lane in lanes.values():
                    while pending and self._can_queue(lane, jobs[pending[0]]):
                        i = pending.popleft()
                        if not self._queue(lane, i, jobs, results):
                            pending.appendleft(i)  # not sent: the worker is gone, the job goes elsewhere
                            break
                if not lanes:
                    continue
                # a reply may already be here, read ahead with the one before it
                ready = [fd for fd, lane in lanes.items() if lane.worker.transport.buffered()]
                wait = 0.0 if ready else min(lane.deadline for lane in lanes.values()) - time.monotonic()
                ready += select.select(list(lanes), [], [], max(0.0, wait))[0]
                now = time.monotonic()
                for fd, lane in list(lanes.items()):
                    if fd not in ready and now < lane.deadline:
                        continue
                    i, *_ = lane.queue.popleft()  # past its deadline, reply() kills the worker
                    results[i] = self._run_reply(lane.worker, lane.since, lane.deadline)
                    lane.since = time.monotonic()
                    if lane.worker.dead:  # the rest never started: they go to another worker
                        pending.extendleft(reversed([j for j, *_ in lane.queue]))
                        lane.queue.clear()
                    if lane.queue:
                        lane.deadline = lane.since + lane.queue[0][1]
                    else:
                        del lanes[fd]
                        self._release(lane.worker, wipe=False)
        finally:
            for lane in lanes.values():  # only when interrupted: their state is unknown
                lane.worker.kill()
                self._release(lane.worker, wipe=False)
        return results

    def _can_queue(self, lane: "_Lane", job: Job) -> bool:
        """One more job for a busy worker? Only small ones (together they fit in the pipe, so
        sending never blocks), and none for a worker due for recycling."""
        if not lane.queue:
            return True
        worn = self.recycle_after and lane.worker.uses >= self.recycle_after
        return (len(lane.queue) < PIPELINE and not worn and not lane.worker.dead
                and _wire_size(job) <= PIPELINE_BYTES and all(small for *_, small in lane.queue))

    def _queue(self, lane: "_Lane", i: int, jobs: list[Job], results: list) -> bool:
        """Send job i to the lane's worker; False when that failed. A first job's failure is
        its result (as in run()); a queued one's is not: it never started."""
        job = jobs[i]
        limits = job.limits or self.limits
        worker = lane.worker
        start, deadline, failed = self._send_run(worker, job.argv, None, job.stdin, limits, job.files, True)
        if failed:
            if not lane.queue:
                results[i] = failed
            return False
        if not lane.queue:
            lane.since, lane.deadline = start, deadline
        lane.queue.append((i, limits.wall_s + self.grace_s, _wire_size(job) <= PIPELINE_BYTES))
        return True

    def workspace(self, files: dict[str, str] | None = None) -> PoolWorkspace:
        return PoolWorkspace(self, files or {})

    def warm(self, n: int | None = None) -> None:
        """Start workers ahead of the first jobs (start-up costs land here, not in a job)."""
        held = [self._acquire() for _ in range(min(n or self.concurrency, self.concurrency))]
        for worker in held:
            self._release(worker, wipe=False)

    def idle_leftovers(self) -> list[int]:
        """Processes other than the worker in each idle sandbox, as the worker sees them
        (in-sandbox pids). Always empty unless something escaped the kill between runs."""
        with self._lock:
            idle, self._idle = self._idle, []
        found = []
        try:
            for worker in idle:
                if not worker.dead:
                    found += worker.call({"op": "ping"}, GRACE_S)["others"]
        finally:
            with self._lock:
                self._idle += idle
        return found

    def close(self) -> None:
        self._closed = True
        with self._lock:
            background = list(self._background)
        wait(background)  # replacements started meanwhile kill themselves (closed)
        with self._lock:
            workers, self._all, self._idle = list(self._all), set(), []
        for worker in workers:
            worker.kill()
