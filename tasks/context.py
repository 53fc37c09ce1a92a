"""What the stages are handed: a typed context, the live parts, and the run as each reads it.

`StageContext` is the stage's own facts (run, cycle, label, the policy version the
engine holds and how many updates are in flight, how to sample), fixed when the flow
calls the stage; nothing writes to it afterwards. `Parts` is what the bodies use to do
the work (tokenizer, sandbox, engine, domains, reward functions, judge): the driver's Runtime
(flywheel/run/runtime.py) or, on a Ray worker, the parts a shard rebuilds from the config
(flywheel/run/shards.py). A body never reads anything else from either.

Every stage task is handed the run as one of the read-only protocols below, each naming
what that stage reads (`SampleRun`, `FanoutRun`, `UpdateRun`, `SyncRun`, `ReplayRun`,
`RunParts` for archive). The Runtime satisfies them all without this module importing it
(the run wiring sits above the stages), and a type checker holds both sides to them;
properties only, so a stage cannot set what another module reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from flywheel.config import FlywheelConfig, GenerationConfig

if TYPE_CHECKING:
    from flywheel.environments.judge import Judge
    from flywheel.environments.registry import Domains
    from flywheel.environments.reward_functions import RewardFunction
    from flywheel.environments.sandbox import Sandbox
    from flywheel.policy.engines import Engine
    from flywheel.policy.teacher import Teacher
    from flywheel.policy.trainer import GRPOTrainer
    from flywheel.storage.lake import Lake


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
    def tokenizer(self) -> Any: ...

    @property
    def sandbox(self) -> Sandbox: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def domains(self) -> Domains: ...

    @property
    def reward_functions(self) -> list[RewardFunction]: ...

    @property
    def judge(self) -> Judge | None: ...  # None without reward.judge.rubric


class RunParts(Protocol):
    """What every stage reads: the run's config, id and lake (all `archive` reads)."""

    @property
    def config(self) -> FlywheelConfig: ...

    @property
    def run_id(self) -> str: ...

    @property
    def lake(self) -> Lake: ...


class SampleRun(RunParts, Protocol):
    @property
    def run_dir(self) -> Path: ...  # where over-long prompts are quarantined

    @property
    def domains(self) -> Domains: ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def policy_version(self) -> int: ...  # the curriculum's prior is this version's evaluation


class Fanout(Protocol):
    """Where generate and score do their work (flywheel/run/fanout.py)."""

    def map(
        self, body: Callable[..., list], items: list, ctx: StageContext, *, engine: bool = False
    ) -> list: ...


class FanoutRun(Protocol):
    @property
    def fanout(self) -> Fanout: ...


class UpdateRun(RunParts, Protocol):
    @property
    def trainer(self) -> GRPOTrainer: ...  # started by the flow before the first update

    @property
    def teacher(self) -> Teacher | None: ...  # on-policy distillation's scorer; None when distill is off

    @property
    def policy_version(self) -> int: ...

    def staging_dir(self, name: str) -> Path: ...

    def record_update(
        self, cycle: int, version: int, export_dir: str | None, checkpoint: tuple | None = None
    ) -> None: ...


class SyncRun(Protocol):
    @property
    def config(self) -> FlywheelConfig: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def engine_version(self) -> int: ...

    def load_policy_into_engine(self, version: int) -> None: ...


class ReplayRun(RunParts, Protocol):
    @property
    def domains(self) -> Domains: ...

    @property
    def judge(self) -> Judge | None: ...
