"""Rewards for sessions, and what closes a session.

Done: the caller's reward, `POST /v1/sessions/{id}/reward` with
`{"reward": <number or null>, "components": {name: number}, "note": str}`, where id is the
gateway's session id (the `X-Flywheel-Session` response header of each call) or the
client's own key for it. The reward closes the session and it is written with it;
`"reward": null` closes it unlabelled at once (the agent is done, nobody will score it).
A session no reward reaches within `gateway.session_timeout_s` of its last call is written
unlabelled: kept in the lake, not trained on.

In offline mode (tasks/agent_runs.py) the flywheel rewards the sessions itself
(`scored_outcome`): by the sampled task's verifier on the agent's final answer, or, where
the task has no verifier of its own, by the agent's return value; the close record says
which (`source`) with the verifier's whole Score.

For sessions of `flywheel gateway serve` written without a reward, later rewards (ingested
feedback naming the session, the workload's verifier, reward functions and judge) are
live_rewards.py's: a label record beside the session, never a rewrite of it.
"""

from __future__ import annotations

import json
import math

from flywheel.gateway.protocol import bad
from flywheel.gateway.recording import now_iso

REWARD_LIMIT = 1e6  # a reward beyond it is a bug of the caller's, not a signal


def parse_reward(body) -> dict:
    """The close record of a reward call (spool and lake): reason, reward, reward_json, closed_at."""
    if not isinstance(body, dict) or "reward" not in body:
        raise bad('the body is {"reward": <number or null>, "components": {...}, "note": "..."}', "reward")
    unknown = sorted(set(body) - {"reward", "components", "note"})
    if unknown:
        raise bad(f"unknown field(s): {', '.join(unknown)}", unknown[0])
    reward = _value(body["reward"], "reward", allow_null=True)
    components = body.get("components") or {}
    if not isinstance(components, dict):
        raise bad("components must be an object of numbers", "components")
    components = {str(k): _value(v, f"components.{k}") for k, v in components.items()}
    note = body.get("note") or ""
    if not isinstance(note, str):
        raise bad("note must be a string", "note")
    detail = {"source": "caller", "components": components, "note": note}
    return {"reason": "reward" if reward is not None else "unlabelled", "reward": reward,
            "reward_json": json.dumps(detail, sort_keys=True), "closed_at": now_iso()}  # fmt: skip


def scored_outcome(reward: float | None, source: str, detail: dict) -> dict:
    """The close record of a session the flywheel rewarded itself (offline mode): `source`
    is "verifier" or "agent"; reward None closes it unlabelled."""
    return {"reason": "reward" if reward is not None else "unlabelled", "reward": reward,
            "reward_json": json.dumps({"source": source, **detail}, sort_keys=True, default=str),
            "closed_at": now_iso()}  # fmt: skip


def timeout_outcome() -> dict:
    return {"reason": "timeout", "reward": None, "reward_json": "", "closed_at": now_iso()}


def _value(value, name: str, allow_null: bool = False):
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or abs(value) > REWARD_LIMIT:  # fmt: skip
        raise bad(f"{name} must be a finite number (|x| <= {REWARD_LIMIT:g})", name)
    return float(value)
