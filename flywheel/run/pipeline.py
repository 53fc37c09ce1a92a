"""Updates in flight: synchronous, or overlapped with the next cycle's rollouts.

`pipeline.max_policy_lag = 0` (the default) runs each update as soon as its cycle is
archived and syncs the new weights before anything else happens: every trajectory is
on-policy. With N > 0, `submit` hands the update to Prefect's task runner (a thread
beside the flow) and the flow goes on to sample and generate the next cycle with the
weights the engine already holds. Before each generation, `admit_rollouts` waits while
more than N updates are in flight and syncs the newest of those it waited for: the
rollouts of cycle c always run on the policy made by the update of cycle c - N - 1.
That is on purpose deterministic (a finished update is not synced early even when it
could be): a seeded run gives the same trajectories whatever the machine's speed.
The lag is recorded on every trajectory (`policy_lag`), and the trainer corrects for
it (policy/grpo.py: decoupled clip with truncated importance weights).

Updates run one after another (each waits for the previous through Prefect's
`wait_for`): each starts from the weights the last one made. The engine is only touched
from the flow's thread (vLLM's `LLM` is not thread-safe); the trainer only from the
update thread once the run has started.

What it does not do: spread rollouts and training over separate devices. On one CPU
machine both share the same cores, so overlap hides waiting, not compute; on GPUs the
engine and the trainer hold their own devices and the overlap is the whole point.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from flywheel.tasks.update import sync, update


class UpdatePipeline:
    def __init__(self, rt, max_lag: int):
        self.rt = rt
        self.max_lag = max_lag
        self.in_flight: list[tuple[int, object]] = []  # (cycle, PrefectFuture), oldest first
        self.done: dict[int, dict] = {}  # cycle -> update and sync metrics, until reported

    def _name(self, stage: str, cycle: int) -> str:
        return f"{stage}-{self.rt.run_id}-c{cycle}"

    def submit(self, cycle: int) -> None:
        """Start `cycle`'s update: now (synchronous), or in the background. The flow has
        started the trainer (flows/flywheel.py), in its own thread, before any update uses it."""
        run_update = update.with_options(task_run_name=self._name("update", cycle))
        if self.max_lag == 0:
            result = run_update(self.rt, cycle)
            self._synced(cycle, result, sync.with_options(task_run_name=self._name("sync", cycle))(self.rt, result))
            return
        previous = [self.in_flight[-1][1]] if self.in_flight else []
        self.in_flight.append((cycle, run_update.submit(self.rt, cycle, wait_for=previous)))

    def admit_rollouts(self) -> float:
        """Before a generation: wait until at most `max_lag` updates are in flight and
        sync the newest one waited for. Returns seconds waited."""
        return self._sync_until(self.max_lag)

    @property
    def lag(self) -> int:
        """Updates in flight now: the lag the next trajectories record."""
        return len(self.in_flight)

    def drain(self) -> None:
        """Wait for every update in flight and sync the last (end of a run)."""
        self._sync_until(0)

    def _sync_until(self, limit: int) -> float:
        t0 = time.monotonic()
        finished = []
        while len(self.in_flight) > limit:
            cycle, future = self.in_flight.pop(0)
            finished.append((cycle, future.result()))  # raises if the update failed
        waited = time.monotonic() - t0
        if finished:  # the engine jumps to the newest version; the others were published
            cycle, result = finished[-1]
            metrics = sync.with_options(task_run_name=self._name("sync", cycle))(self.rt, result)
            for c, r in finished:
                self._synced(c, r, metrics if c == cycle else {})
        return waited

    def abandon(self) -> None:
        """On a failure: let running updates finish (their results are in the lake) but
        sync nothing; a resumed run starts its engine from the published weights."""
        for _, future in self.in_flight:
            future.wait()
        self.in_flight.clear()

    def _synced(self, cycle: int, result: dict, sync_metrics: dict) -> None:
        """Keep the metrics for the cycle summary, and append them to updates.jsonl."""
        metrics = {k: v for k, v in result.items() if k != "probe"}
        metrics.update(sync_metrics, cycle=cycle, synced_at=datetime.now(timezone.utc).isoformat())
        self.done[cycle] = metrics
        with open(self.rt.run_dir / "updates.jsonl", "a") as f:
            f.write(json.dumps(metrics, default=str) + "\n")

    def take_metrics(self) -> dict[int, dict]:
        """Metrics of the updates synced since the last call, by cycle."""
        done, self.done = self.done, {}
        return done
