"""Online mode (issue 45, item 4): a run's cycles train on the live sessions that
`flywheel gateway serve --run-id RUN --version deployed` recorded with the run's deployed
policy.

Each cycle of a run with `gateway.online.enabled`, before its update, the `live` stage
(tasks/live.py) labels what it can (live_rewards.py) and then `claim`s, once, the labelled
live sessions no earlier cycle of the run claimed, oldest first (at most
`gateway.online.max_sessions`). The claim (storage/live_sessions.py) says of each session:

- `use: rl`: its last chain of calls (trajectories.py; other leaves are kept, not trained
  on) goes into this cycle's update with its recorded behaviour logprobs, corrected off
  policy as any lagged sample is (policy/grpo.py, by its policy lag);
- `use: kept`: not for RL, and why: stale (its policy more than `gateway.online.max_lag`
  versions behind the trainer's at the claim), scrubbed (no token ids), or served by a
  policy of another run or a bare model. Kept in the lake for SFT or evaluation, counted in
  the cycle line (`live_kept`);
- `failed`: its reward is under its workload's `negative_below` (`workloads.<w>`; 0.5 for a
  workload the config does not name). Failed sessions, used or kept, become production
  traces of their workload (`traces/`, one batch per claim, rated with their reward, their
  expected answer, where a call's metadata or their label had one, as the correction), so a
  run that samples `traces:<w>` replays them as it replays production's failures
  (tasks/replay.py). Their first call's system and user messages are the trace's prompt.

**Advantage.** A live session has no group of k samples of one prompt, so its baseline is
its workload's: over the latest `gateway.online.baseline_window` labelled live sessions of
the workload this run claimed (this claim's included, ordered by close time), advantage =
(reward - mean) / (std + 1e-6); 0 while the window holds fewer than 2 sessions or all its
rewards are equal (nothing to tell apart). The baseline of each workload is in the claim.

Exactly once: the claim is written once before the update and the update reads only it,
so a cycle killed after its claim takes the same sessions again, and a session in any
claim of the run is never claimed again (storage/live_sessions.py). Unlabelled sessions are
not claimed: they wait, kept, and a later label makes them claimable.

Not done: the staleness is judged at the claim against the trainer's version then; an
asynchronous run's update (pipeline.max_policy_lag) may be one version later, and the
sample's lag is recounted at the update (the correction uses the real lag). Sessions are
read whole from the lake every cycle (no index of unclaimed ones).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from flywheel.gateway.live_rewards import by_session, expected_answer, final_reply
from flywheel.gateway.trajectories import POLICY, session_trajectories, usable_for_rl
from flywheel.policy.trainer import TrainSample
from flywheel.storage.live_sessions import ClaimStore, LabelStore
from flywheel.storage.schema import TRACE_SCHEMA, stable_id
from flywheel.storage.sessions import SESSION_SCHEMA, SessionStore
from flywheel.storage.traces import TraceStore

DEFAULT_NEGATIVE_BELOW = 0.5  # WorkloadConfig's default, for a workload the config does not name


def last_chains(table: pa.Table) -> dict[str, dict]:
    """Each session's chain that ends at its last call (first choice)."""
    out: dict[str, dict] = {}
    for chain in session_trajectories(table):
        best = out.get(chain["session_id"])
        if best is None or (chain["leaf"][0], -chain["leaf"][1]) > (best["leaf"][0], -best["leaf"][1]):
            out[chain["session_id"]] = chain
    return out


def reward_of(rows: list[dict], labels: dict[str, dict]) -> tuple[float | None, str]:
    """The session's reward and who gave it: its caller (in the session), else its label."""
    if rows[0]["labelled"]:
        return rows[0]["reward"], "caller"
    label = labels.get(rows[0]["session_id"])
    return (label["reward"], label["source"]) if label else (None, "")


def baselines(entries: list[dict], window: int) -> dict[str, dict]:
    """Per workload: mean, std and n over its latest `window` entries (by close time)."""
    out = {}
    for name in sorted({e["workload"] for e in entries}):
        rewards = [e["reward"] for e in sorted((e for e in entries if e["workload"] == name),
                                               key=lambda e: (e["closed_at"], e["id"]))][-window:]  # fmt: skip
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        out[name] = {"mean": mean, "std": std, "n": len(rewards)}
    return out


def advantage(reward: float, base: dict) -> float:
    if base["n"] < 2 or base["std"] <= 1e-12:
        return 0.0
    return (reward - base["mean"]) / (base["std"] + 1e-6)


def claim(lake, run_id: str, cycle: int, version: int, online, workloads: dict) -> dict:
    """Cycle `cycle`'s claim (made now, or the one in the lake). `online`: the
    GatewayConfig's `online` section; `workloads`: {name: WorkloadConfig as a dict}."""
    claims = ClaimStore(lake, run_id)
    before = claims.read(cycle)
    if before is not None:
        return before
    store = SessionStore(lake)
    earlier = [s for c, done in claims.all().items() if c != cycle for s in done["sessions"]]
    taken = {s["id"] for s in earlier}
    ids = [i for i in store.ids() if i not in taken]
    table = store.sessions(ids) if ids else SESSION_SCHEMA.empty_table()
    sessions = by_session(table)
    labels = LabelStore(lake).all()
    waiting = []
    for sid, rows in sessions.items():
        reward, source = reward_of(rows, labels)
        if reward is not None:
            waiting.append((rows[0]["closed_at"].isoformat(), sid, reward, source))
    waiting.sort()
    if online.max_sessions:
        waiting = waiting[: online.max_sessions]
    chains = last_chains(
        table.filter(pc.is_in(table["session_id"], pa.array([w[1] for w in waiting], pa.string())))
    )
    entries = []
    for closed_at, sid, reward, source in waiting:
        chain = {**chains[sid], "labelled": True}
        ok, why = usable_for_rl(chain, run_id, version, online.max_lag)
        name = sessions[sid][0]["workload"]
        below = workloads.get(name, {}).get("negative_below", DEFAULT_NEGATIVE_BELOW)
        sampled = sum(1 for lp in chain["completion_logprobs"] if not math.isnan(lp))
        entries.append({"id": sid, "workload": name, "reward": reward, "source": source, "closed_at": closed_at,
                        "policy": chain["policy"], "use": "rl" if ok else "kept", "why": why,
                        "tokens": sampled if ok else 0, "failed": reward < below})  # fmt: skip
    bases = baselines(earlier + entries, online.baseline_window)
    for e in entries:
        e["advantage"] = advantage(e["reward"], bases[e["workload"]]) if e["use"] == "rl" else 0.0
    failed = [e for e in entries if e["failed"]]
    expected = {}  # what a replay is checked against: a call's metadata answer, else its label's
    for e in failed:
        label = labels.get(e["id"], {}).get("detail", {})
        expected[e["id"]] = expected_answer(sessions[e["id"]], None) or label.get("answer")
    batch = replay_failures(lake, run_id, cycle, failed, sessions, expected)
    record = {"run_id": run_id, "cycle": cycle, "policy_version": version, "max_lag": online.max_lag,
              "created_at": datetime.now(timezone.utc).isoformat(), "sessions": entries, "baselines": bases,
              "failures_batch": batch}  # fmt: skip
    return claims.write(cycle, record)


def replay_failures(lake, run_id: str, cycle: int, failed: list[dict], sessions: dict, expected: dict) -> str:
    """The failed sessions as production traces of their workload (one batch); its id, or "".
    `expected`: {session id: its expected answer}, the trace's correction (what a verifier
    of its workload checks a replay against)."""
    if not failed:
        return ""
    traces = TraceStore(lake)
    batch = stable_id("live-failures", run_id, cycle, sorted(e["id"] for e in failed))
    if traces.has_batch(batch):
        return batch
    known, now, rows = traces.known_ids(), datetime.now(timezone.utc), []
    for e in failed:
        srows = sessions[e["id"]]
        first = min(srows, key=lambda r: (r["call_index"], r["choice_index"]))
        if any(m.get("tool_calls") or m["role"] == "tool" for m in first["messages"]):
            continue  # an agent's session is no single-turn task (environments/sources/traces.py)
        messages = [{**m, "tool_calls": None, "tool_call_id": None} for m in first["messages"]
                    if m["role"] in ("system", "user")]  # fmt: skip
        reply = {"role": "assistant", "content": final_reply(srows), "tool_calls": None, "tool_call_id": None}
        trace_id = stable_id("trace", e["workload"], messages, "", reply, length=24)
        if trace_id in known or not any(m["role"] == "user" for m in messages):
            continue
        known.add(trace_id)
        rows.append({"trace_id": trace_id, "workload_id": e["workload"], "client_id": srows[0]["client"],
                     "timestamp": srows[0]["closed_at"], "messages": messages, "tools_json": "", "response": reply,
                     "request_json": "{}", "rating": e["reward"], "corrected": _text(expected.get(e["id"])),
                     "feedback_json": json.dumps({"source": "live", "session": e["id"], "reward_source": e["source"]}),
                     "source": f"gateway session {e['id']}", "batch": batch, "ingested_at": now})  # fmt: skip
    report = {"file": f"live sessions of {run_id} cycle {cycle}", "new": len(rows), "failed": len(failed)}
    traces.commit_batch(batch, pa.Table.from_pylist(rows, schema=TRACE_SCHEMA), [], report)
    return batch


def _text(value) -> str | None:
    return None if value is None else value if isinstance(value, str) else json.dumps(value)


def claimed_samples(lake, run_id: str, cycle: int, trainer_version: int, engine_mismatch: bool):
    """The train samples of cycle's claim (none without one) and its counts for the cycle
    line: live_sessions (trained on), live_tokens (their sampled tokens), live_kept (stale or
    otherwise not for RL), live_failed (sent to replay)."""
    record = ClaimStore(lake, run_id).read(cycle)
    if record is None:
        return [], {}
    used = {e["id"]: e for e in record["sessions"] if e["use"] == "rl"}
    chains = last_chains(SessionStore(lake).sessions(sorted(used))) if used else {}
    samples = []
    for sid in sorted(used):
        chain, m = chains[sid], POLICY.match(chains[sid]["policy"])
        lag = max(0, trainer_version - int(m["version"])) if m else 0
        samples.append(TrainSample(chain["prompt_token_ids"], chain["completion_token_ids"],
                                   chain["completion_logprobs"], used[sid]["advantage"], lag, engine_mismatch))  # fmt: skip
    stats = {"live_sessions": len(used), "live_tokens": sum(e["tokens"] for e in used.values()),
             "live_kept": len(record["sessions"]) - len(used),
             "live_failed": sum(e["failed"] for e in record["sessions"])}  # fmt: skip
    return samples, stats
