"""Where a run stands: the one answer to "is this cycle committed, its update done, its
replay queued; which cycle is next; is the run new or resumed".

A run's state lives in three stores under the lake root, each written last by the stage
that owns it, so each is true or not, never half-written:

- the commit markers (`_commits/`, storage/lake.py): a cycle's tasks and trajectories
  are in the lake (the archive stage);
- the policy manifest (`_policies/`, storage/policies.py): the current policy version and
  the last cycle whose update is published (the update stage, SFT);
- the replay queues (`replay/`, storage/lake.py): cycle n's replay stage wrote the queue
  of cycle n + 1 (maybe empty).

`run_state` reads all three at one moment; the cycle (which stages to run), both flywheel
flows (which cycles to run, whether a cold start comes first) and the cycle's summary
(whether it is a resumed one) read its answer, and nothing else asks the stores these
questions. What it does not do: lock. A `RunState` is a snapshot, stale once a stage
runs; read it again rather than patch it.
"""

from __future__ import annotations

from dataclasses import dataclass

from flywheel.storage.policies import PolicyStore


@dataclass(frozen=True)
class RunState:
    run_id: str
    cycle: int  # the cycle the next three fields are about
    committed: bool  # its tasks and trajectories are in the lake
    updated: bool  # its update is published (an update that learned nothing counts)
    replay_queued: bool  # its replay stage wrote the queue of the cycle after it
    next_cycle: int  # the first cycle whose stages are not all done
    updated_cycle: int  # the last cycle whose update is published; -1 before any
    policy_version: int  # the current policy version; 0 is the base model
    new: bool  # no policy version and no committed cycle yet; else the run is resumed

    @property
    def finished(self) -> bool:
        """Every stage of `cycle` is done: a cycle found so is a resumed one."""
        return self.committed and self.updated and self.replay_queued


def run_state(policies: PolicyStore, cycle: int | None = None) -> RunState:
    """The state of `policies`' run, and of `cycle` in it (default: the next cycle). The
    manifest is the store's copy in memory, which its own `publish` keeps current."""
    lake, run_id, manifest = policies.lake, policies.run_id, policies.manifest
    committed = lake.committed_cycles(run_id)
    updated_cycle = manifest["updated_cycle"]
    next_cycle = 0
    if committed:  # the last committed cycle is next until its update and replay are done too
        last = committed[-1]
        done = updated_cycle >= last and lake.has_replay_queue(run_id, last + 1)
        next_cycle = last + 1 if done else last
    at = next_cycle if cycle is None else cycle
    return RunState(
        run_id=run_id, cycle=at, committed=at in committed, updated=updated_cycle >= at,
        replay_queued=lake.has_replay_queue(run_id, at + 1), next_cycle=next_cycle,
        updated_cycle=updated_cycle, policy_version=manifest["version"],
        new=not manifest["version"] and not committed,
    )  # fmt: skip
