"""What the generate and score stages are handed: a typed context and the live parts.

`StageContext` is the stage's own facts (run, cycle, label, the policy version the
engine holds and how many updates are in flight, how to sample), fixed when the flow
calls the stage; nothing writes to it afterwards. `Parts` is what the bodies use to do
the work (tokenizer, sandbox, engine, domains, reward functions, judge): the driver's Runtime
(flywheel/run/runtime.py) or, on a Ray worker, the parts a shard rebuilds from the config
(tasks/shards.py). A body never reads anything else from either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from flywheel.config import FlywheelConfig, GenerationConfig


@dataclass(frozen=True)
class StageContext:
    config: FlywheelConfig
    run_id: str
    cycle: int  # -1 for evaluations
    label: str  # "train", "eval-greedy", ...: keeps the ids of differently sampled trajectories apart
    policy_version: int  # the version the engine generates with
    policy_lag: int  # updates trained but not yet in the engine when generating (flywheel/run/pipeline.py)
    generation: GenerationConfig


class Parts(Protocol):
    @property
    def tokenizer(self): ...

    @property
    def sandbox(self): ...  # flywheel.environments.sandbox.Sandbox

    @property
    def engine(self): ...  # flywheel.policy.engines.Engine

    @property
    def domains(self): ...  # flywheel.environments.registry.Domains

    @property
    def reward_functions(self) -> list: ...  # flywheel.environments.reward_functions.RewardFunction

    @property
    def judge(self): ...  # flywheel.environments.judge.Judge, or None without reward.judge.rubric
