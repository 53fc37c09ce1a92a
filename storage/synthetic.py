"""Synthetic lake rows, built column by column (fast enough for millions), for the lake's
benchmark and crash tests. Deterministic from (run, cycle, seed): a re-run of a cycle
yields the same trajectory ids, as a real re-run would.

The rows are realistic in shape, not in content: three domains, three levels, groups of
`k` samples per task, prompt and completion token lists of a few dozen ids, rewards in
[0, 1] with some groups solved. Not used by the flywheel itself.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from flywheel.storage.schema import TASK_SCHEMA, TRAJECTORY_SCHEMA

DOMAINS = ("code", "math", "terminal")


def _ids(prefix: str, n: int) -> list[str]:
    return [hashlib.sha256(f"{prefix}/{i}".encode()).hexdigest()[:24] for i in range(n)]


def _lists(rng, rows: int, low: int, high: int, dtype, values) -> pa.Array:
    lengths = rng.integers(low, high, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = values(int(offsets[-1])).astype(dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


def cycle_tables(run_id: str, cycle: int, tasks: int, k: int = 4, seed: int = 0, task_pool: int | None = None,
                 domains: tuple[str, ...] = DOMAINS) -> tuple[pa.Table, pa.Table]:  # fmt: skip
    """(tasks, trajectories) of one cycle: `tasks` tasks drawn from a pool of `task_pool`
    (default: fresh ids per cycle), `k` trajectories each, over `domains` x 3 levels."""
    rng = np.random.default_rng([seed, cycle])
    pool = task_pool or tasks * (cycle + 1)
    picks = rng.choice(pool, size=tasks, replace=False) if task_pool else np.arange(tasks) + tasks * cycle
    task_ids = [hashlib.sha256(f"{run_id}/task/{p}".encode()).hexdigest()[:16] for p in picks]
    levels = [1 + int(p) // len(domains) % 3 for p in picks]
    domains = [domains[p % len(domains)] for p in picks]
    n = tasks * k
    rep = np.repeat(np.arange(tasks), k)
    solved = rng.random(tasks) < 0.3
    reward = np.where(solved[rep], 1.0, np.round(rng.random(n) * 0.9, 2))
    now = datetime.now(timezone.utc)
    task_table = pa.table({
        "task_id": task_ids, "domain": domains, "level": pa.array(levels, pa.int32()),
        "split": ["train"] * tasks,
        "prompt": [[{"role": "user", "content": f"task {t}"}] for t in task_ids],
        "setup_json": ["{}"] * tasks, "verifier_json": ['{"tests": []}'] * tasks,
        "seed": pa.array(picks.astype(np.int64)), "generator_version": ["synthetic-1"] * tasks,
        "origin": ["fresh"] * tasks, "replay_count": pa.array([0] * tasks, pa.int32()),
        "origin_cycle": pa.array([cycle] * tasks, pa.int32()), "cycle": pa.array([cycle] * tasks, pa.int32()),
    }, schema=TASK_SCHEMA)  # fmt: skip
    take = lambda values: [values[i] for i in rep]  # noqa: E731
    completion = _lists(rng, n, 16, 48, np.int32, lambda m: rng.integers(0, 49152, m))
    traj = pa.table({
        "trajectory_id": _ids(f"{run_id}/{cycle}/{seed}", n), "run_id": [run_id] * n,
        "cycle": pa.array([cycle] * n, pa.int32()), "policy_version": pa.array([cycle] * n, pa.int32()),
        "task_id": take(task_ids), "domain": take(domains), "level": pa.array(take(levels), pa.int32()),
        "split": ["train"] * n, "origin": ["fresh"] * n, "replay_count": pa.array([0] * n, pa.int32()),
        "group_id": take(task_ids), "sample_index": pa.array(np.tile(np.arange(k), tasks).astype(np.int32)),
        "messages": pa.array([[{"role": "assistant", "content": "def f(x):\n    return x"}]] * n,
                             pa.list_(TRAJECTORY_SCHEMA.field("messages").type.value_type)),
        "steps": pa.array([[]] * n, TRAJECTORY_SCHEMA.field("steps").type),
        "prompt_token_ids": _lists(rng, n, 24, 64, np.int32, lambda m: rng.integers(0, 49152, m)),
        "completion_token_ids": completion,
        "completion_logprobs": pa.ListArray.from_arrays(
            completion.offsets, pa.array(-rng.random(len(completion.values)).astype(np.float32))),
        "finish_reason": ["stop"] * n, "num_turns": pa.array([1] * n, pa.int32()),
        "num_tool_calls": pa.array([0] * n, pa.int32()), "reward": pa.array(reward),
        "reward_outcome": pa.array(reward), "reward_process": pa.array(np.zeros(n)),
        "reward_penalty": pa.array(np.zeros(n)),
        "verdict": ["pass" if r >= 1 else "fail" for r in reward], "error": [""] * n,
        "tests_passed": pa.array((reward * 8).astype(np.int32)), "tests_total": pa.array([8] * n, pa.int32()),
        "sandbox_backend": ["bwrap"] * n, "verifier_version": ["synthetic-1"] * n, "timings_json": ["{}"] * n,
        "origin_cycle": pa.array([cycle] * n, pa.int32()), "policy_lag": pa.array([0] * n, pa.int32()),
        "created_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        "reward_components": pa.array([[{"name": "verifier", "value": float(r), "error": ""}] for r in reward],
                                      TRAJECTORY_SCHEMA.field("reward_components").type),
        "turns": pa.nulls(n, TRAJECTORY_SCHEMA.field("turns").type),  # whole-episode samples
        "started_cycle": pa.array([-1] * n, pa.int32()),
    }, schema=TRAJECTORY_SCHEMA)  # fmt: skip
    return task_table, traj
