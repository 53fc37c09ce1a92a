"""Training samples from the lake's trajectories: one per episode, or one per turn.

A trajectory without `turns` (single-turn, or an episode whose history was never
edited) is one sample: its prompt and its whole completion, observation tokens masked by
their NaN logprobs. A trajectory with `turns` (its history was windowed or summarised,
or `stepwise: always`: environments/toolkit/context.py) trains turn by turn: each turn is
a sample of the prompt ids the engine was given and the ids it sampled, with their
logprobs, so what the model is trained on is what it saw. Every turn of an episode shares
its group-normalised advantage; where the domain gives per-turn process rewards
(`turn_rewards`, weighted by `reward.turn_weight` when recorded), a turn's advantage adds
its reward less the mean of its group's turn rewards, so turns that moved the task on
count for more than those that did not, and the baseline is the group's own.

A sample's policy lag is counted from the version that sampled it: a turn's own, or for a
whole episode the oldest among its tokens (a partial rollout: tasks/carry.py); any lag
turns on the trainer's truncated importance weights (policy/grpo.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

from flywheel.policy.trainer import TrainSample


def turn_baselines(rows: list[dict]) -> dict[str, float]:
    """Per group: the mean of its act turns' process rewards (groups without any: none)."""
    values: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for t in row.get("turns") or []:
            if t["reward"] is not None:
                values[row["group_id"]].append(t["reward"])
    return {g: sum(v) / len(v) for g, v in values.items()}


def samples_of(row: dict, advantage: float, lag: Callable[[int, int | None], int], engine_mismatch: bool,
               baselines: dict[str, float]) -> list[TrainSample]:  # fmt: skip
    """The samples of one trajectory row. `lag(version, recorded lag)`: the sample's policy lag."""
    turns = row.get("turns")
    if not turns:
        return [TrainSample(row["prompt_token_ids"], row["completion_token_ids"], row["completion_logprobs"],
                            advantage, lag(row["policy_version"], row["policy_lag"]), engine_mismatch)]  # fmt: skip
    base = baselines.get(row["group_id"], 0.0)
    return [
        TrainSample(t["prompt_token_ids"], t["completion_token_ids"], t["completion_logprobs"],
                    advantage + (t["reward"] - base if t["reward"] is not None else 0.0),
                    lag(t["policy_version"], row["policy_lag"]), engine_mismatch)
        for t in turns if t["completion_token_ids"]
    ]  # fmt: skip
