"""`traces:WORKLOAD` for an agent workload: production sessions as workspace tasks.

A workload whose config names `workspace` (`workloads.<name>.workspace`: a JSON file in
the workspace-task format of environments/sources/workspace_tasks.py, without an
instruction: its starting `files` or `archive`, `setup`, `tools`, hidden `tests`,
`max_turns`, `limits`) is an agent workload: what verifies its sessions is the
template's hidden tests, run in the workspace after the episode, and the workload's
`verifier` is not used. Each session becomes one workspace task:

  instruction  the session's first user message (the traces a session logged, one per
               call with a growing history, share it: they are one task);
  everything   else from the template (paths in it are relative to the template file);
  level        the workload's `level`;
  metadata     the workload, the session's trace ids, its ratings, and `negative`: a
               rating under the workload's `negative_below` (a logged failure).

The tasks are then a `WorkspaceTasks` source's: checked once in the run's sandbox (a task
whose untouched workspace already passes the hidden tests is quarantined "trivial"),
split by content, played as episodes, scored by the hidden tests. `logged_failures()`
lists the tasks of sessions rated down; the replay stage queues those the run has not
tried (tasks/replay.py), exactly as for single-turn traces (environments/sources/traces.py).

Not done: a session's own starting state (files it read, a repository at some commit) is
not taken from the trace, which does not carry it: every session of a workload starts
from the template's workspace; the logged tool calls are not replayed nor used as a
reference (no solution is kept, the template's is dropped: it solves no one session);
`logged_passes` is empty (a judge scores one reply, not an agent's session); BFCL-style
tasks (stateful APIs with ground-truth calls) are not made from traces.
"""

from __future__ import annotations

import json
from pathlib import Path

from flywheel.environments.sources.workspace_tasks import WorkspaceTaskError, WorkspaceTasks
from flywheel.storage.schema import TaskSpec, stable_id

NOT_FROM_TEMPLATE = ("id", "instruction", "solution", "split", "level", "metadata")


def read_template(path: str) -> tuple[dict, Path]:
    """The workload's workspace template and the directory its paths are relative to."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise WorkspaceTaskError(f"workspace template {path}: {exc}") from exc
    if not isinstance(raw, dict) or "tests" not in raw:
        raise WorkspaceTaskError(f"workspace template {path}: a JSON object with hidden `tests` is needed")
    return {k: v for k, v in raw.items() if k not in NOT_FROM_TEMPLATE}, p.parent


def session_rows(table, workload: dict, template: dict, base: Path):
    """(where, raw workspace row or None, error, base dir) per session of the traces."""
    negative_below = workload.get("negative_below", 0.5)
    sessions: dict[str, dict] = {}
    for r in table.to_pylist():
        users = [m["content"] for m in r["messages"] if m["role"] == "user" and (m["content"] or "").strip()]
        if not users:
            yield r["source"], None, "no user message: nothing to ask the agent", base
            continue
        s = sessions.setdefault(users[0], {"where": r["source"], "traces": [], "ratings": []})
        s["traces"].append(r["trace_id"])
        if r["rating"] is not None:
            s["ratings"].append(r["rating"])
    for instruction, s in sessions.items():
        negative = any(x < negative_below for x in s["ratings"])
        metadata = {"workload": workload.get("name", ""), "traces": sorted(s["traces"]), "ratings": s["ratings"],
                    "negative": negative}  # fmt: skip
        raw = {**template, "id": stable_id("session", instruction), "instruction": instruction,
               "level": workload.get("level", 1), "metadata": metadata}  # fmt: skip
        yield s["where"], raw, "", base


class SessionTasks(WorkspaceTasks):
    """The sessions of one agent workload as workspace tasks."""

    def __init__(self, workload: str, source):
        from flywheel.storage.lake import Lake
        from flywheel.storage.traces import TraceStore

        self.workload, self.eval_only = workload, False
        self.path = self.name = f"traces:{workload}"
        config = {**source.workload(workload), "name": workload}
        self.source = f"agent sessions of {workload} in {source.uri}, verified by {config['workspace']}"
        self._setup_state()
        template, base = read_template(config["workspace"])
        table = TraceStore(Lake(source.uri, source.endpoint, source.region)).traces(workload)
        if table.num_rows == 0:
            raise WorkspaceTaskError(
                f"no traces of workload {workload!r} in {source.uri} (run `flywheel ingest` first)"
            )
        self.load(session_rows(table, config, template, base))

    def logged_failures(self, split: str = "train") -> list[TaskSpec]:
        """The tasks of the sessions rated down, in a fixed order."""
        return [self.task_of(r, s) for (s, _), rows in sorted(self.cells.items()) if s == split
                for r in rows if r.metadata.get("negative")]  # fmt: skip

    def logged_passes(self, split: str = "train") -> list[tuple[TaskSpec, str]]:
        return []  # a judge scores one reply; a session is many calls (not done)

    @property
    def logged_failure_count(self) -> int:
        """Tasks (both splits) whose session was rated down."""
        return sum(bool(r.metadata.get("negative")) for r in self.all_rows())

    def describe(self) -> str:
        return f"{super().describe()}; {self.logged_failure_count} logged failures"
