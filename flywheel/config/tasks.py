"""The task sections of the config (flywheel/config/__init__.py): which tasks a cycle trains on
(`sampler`, `curriculum`, `replay`) and which held-out ones it is judged on (`eval`). Kept
apart so config.py stays readable; `flywheel.config` still exports them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flywheel.config.section import Section


class SamplerConfig(Section):
    domains: list[str] = Field(
        ["code", "math", "extraction", "data"],
        description="Domains (environments/registry.py): a built-in name, file:PATH, rg/NAME, a glob (rg/*, "
        "rg/algorithmic/*), an installed plug-in, or module:Class.",
    )
    weights: dict[str, float] = Field(
        {},
        description="Mixing weight per entry of `domains` (default 1), shared evenly among the domains a glob selects.",
    )
    levels: list[int] = Field(
        [1, 2, 3], description="Levels fresh tasks come from (the curriculum opens them in order)."
    )
    tasks_per_cycle: int = Field(8, ge=1, description="Fresh plus replayed tasks per cycle.")
    max_replay_fraction: float = Field(0.5, ge=0, le=1)


class EvalConfig(Section):
    """Held-out evaluation (flows/evaluate.py): the sampled domains' eval split, and suites
    nobody here trained on, every pass@1 with its 95% interval."""

    files: list[str] = Field(
        [],
        description="Task files that are eval-only: every row is held out, and the lake refuses their tasks in training.",
    )
    suites: list[str] = Field(
        ["humaneval", "code_transfer"],
        description="Eval-only domains reported beside the held-out cells: humaneval, code_transfer, file:PATH, ...",
    )
    tasks_per_level: int = Field(
        32,
        ge=1,
        description="Held-out tasks per sampled domain and level (32 x 4 domains x 3 levels: ~+/-5 points).",
    )
    max_file_rows: int = Field(
        256,
        ge=0,
        description="A sampled task file's held-out rows are all evaluated, up to this many per level "
        "(not tasks_per_level, which sizes generated domains' cells); 0: tasks_per_level as for the others.",
    )
    suite_tasks_per_level: int = Field(
        20, ge=1, description="Tasks per level of a generated suite (a file suite: all)."
    )
    k: int = Field(
        0, ge=0, description="pass@k samples per task at the training temperature; 0: greedy pass@1 only."
    )
    every_n_cycles: int = Field(
        0, ge=0, description="Evaluate the current policy every N cycles inside the run; 0: off."
    )
    before_and_after: bool = Field(
        True,
        description="A run evaluates its starting policy before its first cycle and its last one at the end.",
    )
    base_before_cold_start: bool = Field(
        False,
        description="With a cold start (`cold_start.references` > 0), the 'before' evaluation is of the base "
        "model, taken before the SFT, so the run's before/after includes what SFT taught; false: the policy "
        "the cycles start from (the SFT'd one), so before/after is RL's part alone.",
    )
    # A full evaluation takes ~12 min on 2 CPU cores (bench/README.md): inside a run the
    # default is smaller, and its intervals say so.
    in_run_tasks_per_level: int = Field(
        8, ge=1, description="Held-out tasks per domain and level inside a run."
    )
    in_run_suites: bool = Field(False, description="Also evaluate eval.suites inside a run.")
    metric: str = Field(
        "held-out", description="The group whose pooled pass@1 picks the best version (or a suite name)."
    )
    patience: int = Field(
        0, ge=0, description="Stop the run after N evaluations without a new best; 0: never."
    )


class CurriculumConfig(Section):
    enabled: bool = Field(True, description="Off: fresh tasks spread evenly over sampler.levels.")
    open_threshold: float = Field(
        0.2, ge=0, le=1, description="A level opens when the one below passes this share of its samples."
    )
    window_cycles: int = Field(3, ge=1, description="Pass rates are measured over this many recent cycles.")
    min_weight: float = Field(
        0.1, gt=0, le=1, description="Floor on the sampling weight of a level whose groups all score alike."
    )
    # thompson: a Beta-posterior draw per task, for hundreds of arms (tasks/curriculum.py)
    strategy: Literal["proportional", "thompson"] = Field("proportional", description="How tasks are spread.")
    prior_strength: float = Field(2.0, gt=0, description="thompson: groups' worth of the evaluation's prior.")
    max_arm_share: float = Field(1.0, gt=0, le=1, description="thompson: most of a cycle one arm may take.")


class ReplayConfig(Section):
    enabled: bool = True
    threshold: float = Field(1.0, description="Best reward below this counts as a failure.")
    min_best: float = Field(
        0.0,
        description="Replay only failures whose best reward was above this: by default near misses, not tasks "
        "no sample earned anything on (their groups come back all zero: no signal). -1: every failure.",
    )
    lookback_cycles: int = Field(3, ge=1, description="Failures older than this many cycles age out.")
    max_replays: int = Field(3, ge=1, description="A task is replayed at most this many times.")
    production_per_cycle: int = Field(
        4,
        ge=0,
        description="Logged production failures (traces: domains) queued per cycle, untried ones first.",
    )
    priority: Literal["recent", "near_miss", "hardest"] = Field(
        "near_miss",
        description="Which failures come first when more are queued than the sampler takes "
        "(near_miss: closest to solved, whose groups most often still vary).",
    )
