"""Requests one at a time: the interface the multi-turn runner schedules turns through.

A multi-turn batch is ragged: one trajectory's reply is 20 tokens, another's 250, and
their tool calls take from milliseconds to seconds. With one `Engine.generate` call per
turn, every trajectory waits for the slowest reply of the turn before its tool runs, and
for the slowest tool before its next turn starts. `Requests` lets the runner hand the
engine each trajectory's next turn the moment it is ready and take back each reply the
moment it is done; an engine with continuous batching (vLLM) runs them in one batch that
changes from step to step.

- `Requests` (the interface): `submit` one prompt for one sample, `collect` advances the
  engine and returns the requests that finished, `close` drops what is still in flight.
- `Lockstep`: any `Engine` through its batched `generate`: `collect` runs everything
  submitted as one call. `continuous` is False, so the runner submits a turn for every
  live trajectory before it collects (the behaviour before this module).
- `ContinuousBatching`: the engines that have their own (vLLM in process, vLLM servers).

`open_requests(engine, continuous)` picks. Not done: the HF engine has no continuous
batching (it pads a batch and runs it to its longest sequence), so it stays lockstep.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace

from flywheel.policy.engines.base import Engine, Sample, SamplingSpec


class Requests(ABC):
    continuous: bool  # True: a request submitted now joins the running batch at its next step

    @abstractmethod
    def submit(self, key: str, prompt: list[int], spec: SamplingSpec) -> None:
        """Start one sample (spec.n is ignored) for `prompt`; `key` names it in `collect`."""

    @abstractmethod
    def collect(self) -> list[tuple[str, Sample]]:
        """Advance the engine; the (key, sample) of every request that finished meanwhile.
        May return nothing; never waits long when nothing is pending."""

    @abstractmethod
    def pending(self) -> int:
        """Requests submitted and not yet collected."""

    def close(self) -> None:
        """Drop the requests still in flight (the runner failed or stopped)."""


class ContinuousBatching(ABC):
    """An engine that takes requests one at a time into a running batch."""

    @abstractmethod
    def requests(self) -> Requests: ...


class Lockstep(Requests):
    """Everything submitted since the last `collect` as one `generate` call. Requests in
    one call share a spec, so the call samples up to the largest `max_tokens` asked for and
    each sample is cut to its own."""

    continuous = False

    def __init__(self, engine: Engine, tokenizer):
        self.engine, self.tok = engine, tokenizer
        self.queue: list[tuple[str, list[int], SamplingSpec]] = []

    def submit(self, key, prompt, spec):
        self.queue.append((key, prompt, spec))

    def collect(self):
        if not self.queue:
            return []
        batch, self.queue = self.queue, []
        spec = replace(batch[0][2], n=1, max_tokens=max(s.max_tokens for _, _, s in batch))
        outs = self.engine.generate([p for _, p, _ in batch], spec)
        return [(key, cut(self.tok, out[0], s.max_tokens)) for (key, _, s), out in zip(batch, outs)]

    def pending(self):
        return len(self.queue)

    def close(self):
        self.queue = []


def cut(tokenizer, sample: Sample, budget: int) -> Sample:
    """`sample` cut to its first `budget` tokens (finish reason "length")."""
    if len(sample.token_ids) <= budget:
        return sample
    ids = list(sample.token_ids[:budget])
    return Sample(
        tokenizer.decode(ids, skip_special_tokens=True), ids, list(sample.logprobs[:budget]), "length"
    )


def open_requests(engine: Engine, tokenizer, continuous: bool = True) -> Requests:
    """The engine's own continuous batching when it has one and `continuous`, else lockstep."""
    if continuous and isinstance(engine, ContinuousBatching):
        return engine.requests()
    return Lockstep(engine, tokenizer)
