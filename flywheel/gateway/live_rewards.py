"""Rewards for live sessions that nobody rewarded when they were written (issue 45, item 2):
from later feedback in the production logs, and from the session's workload.

A live session is one `flywheel gateway serve` recorded (`is_live`): its own close record
is the caller's reward or the timeout. Sessions of offline mode and of evaluations, which
the flywheel rewarded itself (tasks/agent_runs.py), are not live and are never relabelled.

**Feedback** (`feedback_labels`): an ingested trace (storage/traces.py) names a session by
`feedback.session_id` (or `feedback.x-flywheel-session`), the request's
`metadata.session_id`, or an `X-Flywheel-Session` entry of the request's `headers` /
`extra_headers` (as SDK loggers record them); its `rating` becomes the session's reward, as
given (thumbs up 1, down 0). The name is the gateway's session id, or the client's own key
for the session when exactly one live session has that key (a `user` key groups many: such
feedback is left unmatched and counted). The latest feedback of a session wins.

**The workload** (`workload_rows`): a session of a workload in the config's `workloads` is
made a task-file row (environments/sources/task_rows.py) as a trace is
(environments/sources/traces.py): its first call's system and user messages are the prompt,
its last call's reply the completion, the workload's `verifier` the kind, and the expected
answer, for kinds that need one, the `metadata.answer` (or `metadata.expected`) a call of
the session carried, else a correction in feedback naming it. The stage (tasks/live.py)
scores those rows as the score stage scores any row: the verifier in the sandbox, then
`reward.functions` and `reward.judge`. A session whose row cannot be made (no user message,
tool calls in its first messages, no expected answer for a kind that needs one) stays
unlabelled, with the reason counted.

Labels are written once, beside the session (storage/live_sessions.py, which says why
there rather than in the session). Not done: waiting for feedback before the verifier
labels a session (the first label wins, so feedback that comes after the verifier's label
is not used); workspace (agent) workloads' hidden tests for live sessions (their sessions
start from no known workspace); feedback matched by conversation content rather than a
session name.
"""

from __future__ import annotations

import json
from collections import Counter

from flywheel.environments.sources.task_file import FileTasks

CALLER_SOURCES = ("caller",)  # rewards.py parse_reward: the only source a live session's own record names


def is_live(row: dict) -> bool:
    """A session `flywheel gateway serve` recorded (its own reward from its caller, or none)."""
    if not row["reward_json"]:
        return True
    try:
        return json.loads(row["reward_json"]).get("source") in CALLER_SOURCES
    except ValueError:
        return False


def by_session(table) -> dict[str, list[dict]]:
    """The live sessions' rows, by session id."""
    out: dict[str, list[dict]] = {}
    for row in table.to_pylist():
        out.setdefault(row["session_id"], []).append(row)
    return {sid: rows for sid, rows in out.items() if is_live(rows[0])}


def _json(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def session_ref(trace: dict) -> str | None:
    """The session a trace's feedback names, or None."""
    feedback, request = _json(trace["feedback_json"]), _json(trace["request_json"])
    for key in ("session_id", "x-flywheel-session", "X-Flywheel-Session"):
        if isinstance(feedback.get(key), str) and feedback[key]:
            return feedback[key]
    metadata = request.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("session_id"), str) and metadata["session_id"]:
        return metadata["session_id"]
    for name in ("headers", "extra_headers"):
        headers = request.get(name)
        if isinstance(headers, dict):
            for k, v in headers.items():
                if k.lower() == "x-flywheel-session" and isinstance(v, str) and v:
                    return v
    return None


def feedback_of(sessions: dict[str, list[dict]], traces) -> tuple[dict[str, dict], Counter]:
    """{session id: the latest feedback naming it: rating, corrected, trace_id}, and counts
    of what was not matched (`unknown`: no such live session; `ambiguous`: a key of many)."""
    keys: dict[str, list[str]] = {}
    for sid, rows in sessions.items():
        if rows[0]["session_key"]:
            keys.setdefault(rows[0]["session_key"], []).append(sid)
    found: dict[str, dict] = {}
    counts: Counter = Counter()
    rows = sorted(
        traces.to_pylist(), key=lambda t: (t["timestamp"] is not None, t["timestamp"] or 0, t["trace_id"])
    )
    for trace in rows:  # oldest first: a later feedback replaces an earlier one
        ref = session_ref(trace)
        if ref is None:
            continue
        sid = ref if ref in sessions else None
        if sid is None and len(keys.get(ref, [])) == 1:
            sid = keys[ref][0]
        if sid is None:
            counts["ambiguous" if ref in keys else "unknown"] += 1
            continue
        found[sid] = {
            "rating": trace["rating"],
            "corrected": trace["corrected"],
            "trace_id": trace["trace_id"],
        }
    return found, counts


def feedback_labels(feedback: dict[str, dict]) -> dict[str, tuple[float, dict]]:
    """{session id: (reward, detail)} for the feedback with a rating."""
    return {sid: (float(f["rating"]), {"trace_id": f["trace_id"], "rating": f["rating"]})
            for sid, f in feedback.items() if f["rating"] is not None}  # fmt: skip


def final_reply(rows: list[dict]) -> str:
    last = max(rows, key=lambda r: (r["call_index"], -r["choice_index"]))
    return (last["response"] or {}).get("content") or ""


def expected_answer(rows: list[dict], feedback: dict | None) -> str | None:
    for row in sorted(rows, key=lambda r: r["call_index"]):
        metadata = _json(row["request_json"]).get("metadata") or {}
        for key in ("answer", "expected"):
            if isinstance(metadata, dict) and isinstance(metadata.get(key), str):
                return metadata[key]
    return feedback.get("corrected") if feedback else None


def workload_row(
    sid: str, rows: list[dict], workload: dict, feedback: dict | None
) -> tuple[dict | None, str]:
    """(task-file row, "") or (None, why the session cannot be one)."""
    first = min(rows, key=lambda r: (r["call_index"], r["choice_index"]))
    messages = first["messages"]
    if any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
        return None, "tool calls in its first messages"
    prompt = [
        {"role": m["role"], "content": m["content"] or ""}
        for m in messages
        if m["role"] in ("system", "user")
    ]
    if not any(m["role"] == "user" for m in prompt):
        return None, "no user message"
    raw = {
        "id": sid,
        "prompt": prompt,
        "verifier": workload.get("verifier", "none"),
        "level": workload.get("level", 1),
    }
    answer = expected_answer(rows, feedback)
    if answer is not None:
        raw["answer"] = answer
    return raw, ""


class SessionTasks(FileTasks):
    """Live sessions of one workload as task-file rows (`live:<workload>`), verified as a
    task file's rows are. Not a domain of any run: nothing samples it."""

    def __init__(self, workload: str, rows):
        self.workload, self.eval_only = workload, False
        self.path = self.name = f"live:{workload}"
        self.source = f"live sessions of workload {workload}"
        self._load(rows)

    def _tally(self) -> None:
        if self.cells:  # a file's rows all set aside stop its run; here they are counted
            super()._tally()

    def tasks(self) -> dict[str, object]:
        """{session id: its TaskSpec}."""
        return {r.key: self.task_of(r) for rows in self.cells.values() for r in rows}


def workload_tasks(sessions: dict[str, list[dict]], workloads: dict[str, dict], feedback: dict[str, dict]):
    """[(domain, {session id: task})] per configured workload, and the counts of sessions
    that could not be made tasks, by reason."""
    out, counts = [], Counter()
    for name in sorted({rows[0]["workload"] for rows in sessions.values()}):
        if name not in workloads:
            continue
        rows = []
        for sid, srows in sorted(sessions.items()):
            if srows[0]["workload"] != name:
                continue
            raw, why = workload_row(sid, srows, workloads[name], feedback.get(sid))
            if raw is None:
                counts[why] += 1
            else:
                rows.append((f"session {sid}", raw, ""))
        if not rows:
            continue
        env = SessionTasks(name, rows)
        for q in env.quarantined:
            counts[q["reason"].split(":")[0][:60]] += 1
        if env.cells:
            out.append((env, env.tasks()))
    return out, counts
