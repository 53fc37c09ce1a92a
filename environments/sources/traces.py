"""`traces:WORKLOAD`: a workload's production traces (storage/traces.py) as a domain.

Each trace becomes a task-file row (environments/sources/task_rows.py) and is then checked,
split, sampled and verified exactly like a row of a task file (this class is a
`FileTasks` whose rows come from the lake):

  prompt     the logged request's messages (system, user, assistant turns);
  answer     the corrected answer from feedback, else the logged response when its
             rating was positive (>= the workload's `negative_below`);
  verifier   the workload's (`workloads.<name>.verifier`: any task-file kind, or `none`
             for reward functions and the judge alone);
  reference  the same answer as a reply, so a corrected or approved response is an SFT
             demonstration (cold start, `flywheel sft --references`).

A trace whose logged response failed (rating below `negative_below`, a host check of
the logged response against the expected answer fails, or, with `judge_logged`, the
run's judge scores it under `reward.judge.pass_score`) is a *logged failure*:
`logged_failures()` lists them, and the replay stage queues those not yet tried in the
run (tasks/replay.py). A trace that cannot be a task (no user turn, tool calls in the
prompt, no expected answer for a verifier that needs one) is quarantined with its
source file and line.

A trace with tool calls is no single-turn task (quarantined here, kept in the lake): an
agent workload, whose config names a workspace template (`workloads.<name>.workspace`),
makes its sessions workspace tasks instead (environments/sources/trace_sessions.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from flywheel.environments.sources.task_file import FileTasks, TaskFileError
from flywheel.environments.verifiers import KINDS, kind_of
from flywheel.storage.schema import TaskSpec


@dataclass(frozen=True)
class TraceSource:
    """Where a run's traces are (its lake) and how each workload is verified (JSON of
    `workloads`): hashable, so a domain is built once per process and source."""

    uri: str
    endpoint: str | None
    region: str
    workloads_json: str

    def workload(self, name: str) -> dict:
        return json.loads(self.workloads_json).get(name, {})


def trace_rows(table, workload: dict):
    """(where, raw task-file row or None, error) per trace."""
    verifier = workload.get("verifier", "none")
    negative_below = workload.get("negative_below", 0.5)
    for r in table.to_pylist():
        where = r["source"]
        if any(m.get("tool_calls") or m["role"] == "tool" for m in r["messages"]):
            yield where, None, ("tool calls in the prompt: a multi-turn trace is not a single-turn task "
                          "(an agent workload names a workspace template: workloads.<name>.workspace)")
            continue
        logged = (r["response"] or {}).get("content")
        rating = r["rating"]
        answer = r["corrected"] if r["corrected"] is not None else (
            logged if rating is not None and rating >= negative_below else None)  # fmt: skip
        if answer is None and kind_of(verifier).solution == "answer":
            yield where, None, f"no expected answer for verifier {verifier}: no correction and no positive rating"
            continue
        raw = {
            "id": r["trace_id"], "prompt": [{"role": m["role"], "content": m["content"]} for m in r["messages"]],
            "verifier": verifier, "level": workload.get("level", 1), "reference": answer,
            "metadata": {"workload": r["workload_id"], "rating": rating, "logged": logged,
                         "negative": rating is not None and rating < negative_below},
        }  # fmt: skip
        if answer is not None:
            raw["answer"] = answer
        yield where, raw, ""


class TraceTasks(FileTasks):
    """The tasks of one workload's traces; verified as a task file's rows are."""

    def __init__(self, workload: str, source: TraceSource):
        from flywheel.storage.lake import Lake
        from flywheel.storage.traces import TraceStore

        self.workload, self.eval_only = workload, False
        self.path = self.name = f"traces:{workload}"
        self.source = f"traces of workload {workload} in {source.uri}"
        config = source.workload(workload)
        table = TraceStore(Lake(source.uri, source.endpoint, source.region)).traces(workload)
        if table.num_rows == 0:
            raise TaskFileError(f"no traces of workload {workload!r} in {source.uri} (run `flywheel ingest` first)")
        self._load(trace_rows(table, config))
        self._mark_failures()

    def _mark_failures(self) -> None:
        """A row's logged response failed: negative feedback, or a host check of it fails."""
        for rows in self.cells.values():
            for row in rows:
                failed = bool(row.metadata.get("negative"))
                logged = row.metadata.get("logged")
                if not failed and KINDS[row.verifier].host and logged is not None:
                    failed = self.job(self._task(row, "train"), logged).verdict != "pass"
                row.metadata["logged_failed"] = failed

    def logged_failures(self, split: str = "train") -> list[TaskSpec]:
        """The tasks whose logged response failed, in a fixed order."""
        return [self._task(r, s) for (s, _), rows in sorted(self.cells.items()) if s == split
                for r in rows if r.metadata.get("logged_failed")]  # fmt: skip

    def logged_passes(self, split: str = "train") -> list[tuple[TaskSpec, str]]:
        """(task, logged response) of the tasks whose logged response did not fail, for a
        judge to look at (`workloads.<w>.judge_logged`)."""
        return [(self._task(r, s), r.metadata["logged"]) for (s, _), rows in sorted(self.cells.items()) if s == split
                for r in rows if not r.metadata.get("logged_failed") and r.metadata.get("logged") is not None]  # fmt: skip

    @property
    def logged_failure_count(self) -> int:
        """Tasks (both splits) whose logged response failed."""
        return sum(bool(r.metadata.get("logged_failed")) for rows in self.cells.values() for r in rows)

    def describe(self) -> str:
        return f"{super().describe()}; {self.logged_failure_count} logged failures"
