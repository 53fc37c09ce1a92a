"""The one thread that talks to the engine: concurrent requests in, batched generate calls out.

The engines are not thread-safe and batch best when handed many prompts at once, while the
HTTP server takes requests concurrently. `EngineLoop.submit(prompt, spec)` queues one
request and returns a Future of its `spec.n` samples; the loop thread takes everything
queued and:

- with an engine that batches continuously (vLLM in process, vLLM servers: the
  `ContinuousBatching` of policy/engines/requests.py), submits each sample as its own
  request, with its own sampling parameters, and collects them as they finish, taking new
  requests between engine steps;
- with any other (the `hf` engine), makes one `generate` call per group of requests that
  share temperature, top-p, seed and n, sampling up to the group's largest max_tokens and
  cutting each sample to its own (`requests.cut`), as the lockstep runner does.

Stop strings are applied afterwards, at a token boundary (`apply_stop`), and every
sample's text is the decode of its token ids: what the client gets is exactly what the
ids spell. Not done: stop strings do not end sampling early (the engines take none), so a
stopped reply costs its full length.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace

from flywheel.policy.engines.base import Engine, Sample, SamplingSpec
from flywheel.policy.engines.requests import ContinuousBatching, cut


class Overloaded(RuntimeError):
    pass


@dataclass
class _Job:
    prompt: list[int]
    spec: SamplingSpec
    future: Future


class EngineLoop:
    def __init__(self, engine: Engine, tokenizer, max_pending: int = 256):
        self.engine, self.tok, self.max_pending = engine, tokenizer, max_pending
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.pending = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="gateway-engine", daemon=True)
        self.thread.start()

    def submit(self, prompt: list[int], spec: SamplingSpec) -> Future:
        with self.lock:
            if self.pending + spec.n > self.max_pending:
                raise Overloaded(
                    f"{self.pending} samples are queued (gateway.max_pending {self.max_pending})"
                )
            self.pending += spec.n
        future: Future = Future()
        self.jobs.put(_Job(prompt, spec, future))
        return future

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=30)

    def _done(self, job: _Job, samples=None, error: BaseException | None = None) -> None:
        with self.lock:
            self.pending -= job.spec.n
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result([self._exact(s) for s in samples])

    def _exact(self, s: Sample) -> Sample:
        """The sample with its text decoded from its ids (what every client gets)."""
        return Sample(self.tok.decode(s.token_ids, skip_special_tokens=True), list(s.token_ids),
                      [float(x) for x in s.logprobs], s.finish_reason)  # fmt: skip

    def _take(self, block: bool) -> list[_Job] | None:
        """Queued jobs (waiting for one when `block`); None when the loop is closed."""
        jobs = []
        try:
            job = self.jobs.get(block=block, timeout=None)
            while True:
                if job is None:
                    return None
                jobs.append(job)
                job = self.jobs.get_nowait()
        except queue.Empty:
            return jobs

    def _run(self) -> None:
        if isinstance(self.engine, ContinuousBatching):
            self._run_continuous()
        else:
            self._run_lockstep()

    def _run_lockstep(self) -> None:
        while (jobs := self._take(block=True)) is not None:
            groups: dict[tuple, list[_Job]] = {}
            for job in jobs:
                s = job.spec
                groups.setdefault((s.temperature, s.top_p, s.seed, s.n), []).append(job)
            for group in groups.values():
                spec = replace(group[0].spec, max_tokens=max(j.spec.max_tokens for j in group))
                try:
                    outs = self.engine.generate([j.prompt for j in group], spec)
                except Exception as exc:  # noqa: BLE001  (the requests fail, the loop goes on)
                    for job in group:
                        self._done(job, error=exc)
                    continue
                for job, samples in zip(group, outs):
                    self._done(job, [cut(self.tok, s, job.spec.max_tokens) for s in samples])

    def _run_continuous(self) -> None:
        requests = self.engine.requests()  # type: ignore[attr-defined]
        live: dict[str, tuple[_Job, list]] = {}
        count = 0
        while True:
            jobs = self._take(block=not requests.pending())
            if jobs is None:
                requests.close()
                return
            for job in jobs:
                count += 1
                live[str(count)] = (job, [None] * job.spec.n)
                try:
                    for j in range(job.spec.n):
                        seed = None if job.spec.seed is None else job.spec.seed + j
                        requests.submit(f"{count}-{j}", job.prompt, replace(job.spec, n=1, seed=seed))
                except Exception as exc:  # noqa: BLE001
                    del live[str(count)]
                    self._done(job, error=exc)
            try:
                finished = requests.collect()
            except Exception as exc:  # noqa: BLE001  (the engine failed: every live request fails)
                for job, _ in live.values():
                    self._done(job, error=exc)
                live.clear()
                requests.close()
                requests = self.engine.requests()  # type: ignore[attr-defined]
                continue
            for key, sample in finished:
                job_key, j = key.rsplit("-", 1)
                job, samples = live[job_key]
                samples[int(j)] = sample
                if all(s is not None for s in samples):
                    del live[job_key]
                    self._done(job, samples)


def apply_stop(tokenizer, sample: Sample, stops: list[str]) -> Sample:
    """The sample cut before the first token whose text reaches a stop string (finish
    reason "stop"); the stop string is never returned, and text stays the decode of the
    ids kept. A stop string that starts inside a token loses that token's text before it."""
    if not stops or not any(s in sample.text for s in stops):
        return sample
    ids = sample.token_ids
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        if any(s in text for s in stops):
            kept = ids[: k - 1]
            return Sample(tokenizer.decode(kept, skip_special_tokens=True), list(kept),
                          list(sample.logprobs[: k - 1]), "stop")  # fmt: skip
    return sample
