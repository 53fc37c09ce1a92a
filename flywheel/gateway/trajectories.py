"""Written sessions as trajectories: the token sequence RL trains on, and whether it may.

A session's calls form a tree: a call continues one reply of an earlier call (its parent).
Each leaf (a choice no later call continued) ends a chain from a root call, and where every
call of the chain was `continued` (prompts.py) the leaf's prompt ids are the root's prompt
followed by every earlier reply's sampled ids and the ids of the messages after it. So a
chain is one multi-turn trajectory in the convention of tasks/multiturn.py:

    prompt_token_ids      the root call's prompt;
    completion_token_ids  everything after it: replies and the messages between them;
    completion_logprobs   the engine's logprob for each sampled token, NaN elsewhere (the
                          trainer masks NaN positions out of the loss).

A chain is cut where a call was not continued (its tools changed, its parent was in
another session, it was re-encoded): the trajectory starts at that call.

`usable_for_rl` says why a trajectory may not be trained on: unlabelled, scrubbed (no ids),
or from a policy more than `max_lag` versions behind the current one (the staleness bound of
issue 45 item 4; `policy` is "<run>@v<k>"; one of another run, or a bare model, is stale).

Offline mode (tasks/agent_runs.py) makes the chain ending at a session's last call the
rollout of its agent run, grouped per task like any other; online mode (online.py) makes
it a sample of the update, with its workload's baseline for the advantage. Not done:
training on the other leaves of a session (kept in the lake).
"""

from __future__ import annotations

import math
import re

import pyarrow as pa

POLICY = re.compile(r"^(?P<run>.+)@v(?P<version>\d+)$")


def session_trajectories(table: pa.Table) -> list[dict]:
    """One dict per leaf of every session in `table` (SESSION_SCHEMA rows)."""
    sessions: dict[str, dict[tuple[int, int], dict]] = {}
    for row in table.to_pylist():
        sessions.setdefault(row["session_id"], {})[(row["call_index"], row["choice_index"])] = row
    out = []
    for sid, rows in sessions.items():
        parents = {(r["parent_call"], r["parent_choice"]) for r in rows.values()}
        calls = {c: r for (c, _), r in rows.items()}  # a call's own fields (any of its choices)
        for key in sorted(rows):
            if (key[0], key[1]) in parents:
                continue  # continued by a later call: not a leaf
            out.append(_chain(sid, rows, calls, key))
    return out


def _chain(sid: str, rows: dict, calls: dict, leaf: tuple[int, int]) -> dict:
    path = [leaf]  # (call, choice) from the leaf back to the chain's root
    while calls[path[-1][0]]["continued"] and calls[path[-1][0]]["parent_call"] >= 0:
        call = calls[path[-1][0]]
        path.append((call["parent_call"], call["parent_choice"]))
    path.reverse()
    last = rows[leaf]
    root_len = len(rows[path[0]]["prompt_token_ids"])
    sequence = list(last["prompt_token_ids"]) + list(last["completion_token_ids"])
    logprobs = [math.nan] * len(sequence)
    for key in path:
        row = rows[key]
        start = len(row["prompt_token_ids"])
        logprobs[start : start + len(row["completion_token_ids"])] = row["completion_logprobs"]
    return {
        "session_id": sid,
        "leaf": leaf,
        "calls": [k[0] for k in path],
        "messages": [*last["messages"], last["response"]],
        "prompt_token_ids": sequence[:root_len],
        "completion_token_ids": sequence[root_len:],
        "completion_logprobs": logprobs[root_len:],
        "num_turns": len(path),
        "reward": last["reward"],
        "labelled": last["labelled"],
        "scrubbed": last["scrubbed"],
        "policy": last["policy"],
        "workload": last["workload"],
    }


def usable_for_rl(trajectory: dict, run_id: str, version: int, max_lag: int) -> tuple[bool, str]:
    """(True, "") or (False, why not)."""
    if not trajectory["labelled"]:
        return False, "unlabelled"
    if trajectory["scrubbed"]:
        return False, "scrubbed: no token ids"
    m = POLICY.match(trajectory["policy"] or "")
    if m is None or m["run"] != run_id:
        return False, f"served by {trajectory['policy']!r}, not a policy of run {run_id}"
    lag = version - int(m["version"])
    if lag > max_lag:
        return False, f"stale: policy v{m['version']}, {lag} versions behind v{version} (max {max_lag})"
    return True, ""
