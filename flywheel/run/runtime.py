"""The live parts of a run: lake, domains, sandbox, engine, trainer, fan-out, reward
functions, and the policy manifest.

Built once per flow run from the config, so stages never branch on a backend: they call
the interfaces. Start-up checks the cheap things first (model path, lake reachable,
domains and task files readable, sandbox works, reward functions import there) so that
bad input stops in seconds with a message naming it, before minutes go into starting
vLLM and DeepSpeed. The domains come from flywheel/run/domains.py (shared with the
fan-out's shards, which build them without the rest of a runtime).

The policy manifest (in the lake, storage/policies.py) records which policy version is
current, where its weights and checkpoint are, and which cycle's update made it: a
resumed run, here or on another machine sharing the lake, loads those weights and never
repeats an update.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flywheel.environments import reward_functions
from flywheel.environments.base import ChecksTasks
from flywheel.environments.sandbox import make_sandbox
from flywheel.config import FlywheelConfig
from flywheel.run.fanout import make_fanout
from flywheel.run.model_prep import ModelError, resolve_model
from flywheel.run.domains import build_domains, write_quarantine
from flywheel.run.lifecycle import RunState, run_state
from flywheel.storage.lake import Lake
from flywheel.storage.policies import PolicyStore
from flywheel.tasks.context import StageContext

if TYPE_CHECKING:
    from flywheel.environments.judge import Judge
    from flywheel.policy.engines import Engine
    from flywheel.policy.teacher import Teacher
    from flywheel.policy.trainer import GRPOTrainer

log = logging.getLogger("flywheel")


def check_inputs(config: FlywheelConfig, say=log.info) -> tuple[str, Lake]:
    """The cheap checks, in seconds: the model dir exists (or the default is converted),
    LoRA's target modules are in it, a distillation teacher exists and shares the model's
    tokenizer, and the lake is reachable. Raises ModelError, LoraTargetError or LakeError
    naming what is wrong."""
    model_dir = resolve_model(config.model.path, config.model.cache_dir, log=say)
    if config.trainer.lora is not None:
        from flywheel.policy.lora import check_targets

        check_targets(model_dir, config.trainer.lora)
    if config.distill.mode != "off":
        from flywheel.policy.teacher import TeacherError, check_teacher

        try:
            check_teacher(teacher_dir(config, say), model_dir)
        except TeacherError as exc:
            raise ModelError(str(exc)) from None
    return model_dir, Lake(config.lake_uri, config.store.endpoint, config.store.region)


def teacher_dir(config: FlywheelConfig, say=log.info) -> str:
    """`distill.teacher` as a local HF model dir (ModelError naming the key if it is not one)."""
    try:
        return resolve_model(config.distill.teacher, config.model.cache_dir, log=say)
    except ModelError as exc:
        raise ModelError(f"distill.teacher: {exc}") from None


class Runtime:
    """Not a dataclass on purpose: Prefect walks dataclass parameters of tasks."""

    def __init__(self, config: FlywheelConfig, say=log.info):
        self.config = config
        self.run_id = config.run_id
        self.run_dir = config.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.base_model, self.lake = check_inputs(config, say)
        self.domains = build_domains(config)
        functions = reward_functions.load([f.spec() for f in config.reward.functions])
        warmup = tuple(dict.fromkeys(e.sandbox_warmup for e in self.domains if e.sandbox_warmup))
        self.sandbox = make_sandbox(config.sandbox, warmup)
        try:
            probe = self.sandbox.run(_probe_job())
            if probe.error or probe.stdout.strip() != "42":
                raise RuntimeError(
                    f"sandbox backend {config.sandbox.backend!r} cannot run code here: "
                    f"{probe.error or probe.stderr.strip()[-300:]}"
                )
            reward_functions.probe(self.sandbox, functions)
            for env in self.domains:  # task-file rows whose tests a stub passes or their reference fails
                if isinstance(env, ChecksTasks):
                    env.validate(self.sandbox)
        except BaseException:
            self.sandbox.close()
            raise
        write_quarantine(self.domains, self.run_dir, say)
        self.reward_functions = functions
        self.policies = PolicyStore(
            self.lake, self.run_id, self.run_dir / "policy-cache", keep_hf=config.policy_exports_kept
        )
        from transformers import AutoTokenizer

        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.base_model)
        self._say = say
        self._engine: Engine | None = None
        self._engine_version = 0
        self._judge: Judge | None = None
        self._trainer: GRPOTrainer | None = None
        self._teacher: Teacher | None = None
        self.fanout = make_fanout(self)  # where generate and score run; Ray starts on first use

    # ---- policy versions -----------------------------------------------------------------
    @property
    def manifest(self) -> dict:
        return self.policies.manifest

    @property
    def policy_version(self) -> int:
        return self.policies.version

    @property
    def policy_dir(self) -> str:
        return self.policies.hf_dir() or self.base_model

    def state(self, cycle: int | None = None) -> RunState:
        """Where the run stands, and `cycle` in it (flywheel/run/lifecycle.py)."""
        return run_state(self.policies, cycle)

    def next_cycle(self) -> int:
        """The first cycle whose stages are not all done."""
        return self.state().next_cycle

    def stage_context(
        self, cycle: int, label: str = "train", generation=None, policy_lag: int = 0
    ) -> StageContext:
        """The generate and score stages' context, fixed now (tasks/context.py)."""
        return StageContext(config=self.config, run_id=self.run_id, cycle=cycle, label=label,
                            policy_version=self.engine_version, policy_lag=policy_lag,
                            generation=generation or self.config.generation)  # fmt: skip

    def staging_dir(self, name: str) -> Path:
        """Where the trainer writes an export or checkpoint before it is published."""
        return self.run_dir / "staging" / name

    def record_update(
        self, cycle: int, version: int, export_dir: str | None, checkpoint: tuple | None = None
    ) -> None:
        """Publish `cycle`'s update as policy `version` (manifest written last)."""
        self.policies.publish(cycle, version, export_dir, checkpoint)

    @property
    def engine(self) -> Engine:
        """Started on first use, so a resumed run with nothing left to generate skips it."""
        if self._engine is None:
            from flywheel.policy.engines import make_engine

            version, policy_dir = self.policy_version, self.policy_dir
            from flywheel.run.console import start_deaf_to_ctrl_c

            self._say(f"Starting the {self.config.engine.backend} engine on {policy_dir} ...")
            # stopped by close(), not by a Ctrl-C to the process group
            self._engine = start_deaf_to_ctrl_c(
                lambda: make_engine(policy_dir, self.config.engine, self.config.seed), "engine-start"
            )
            self._engine_version = version
        return self._engine

    @property
    def judge(self) -> Judge | None:
        """`reward.judge`'s judge (environments/judge.py), built on first use; None without a rubric."""
        if self._judge is None and self.config.reward.judge.rubric:
            from flywheel.environments.judge import make_judge

            self._judge = make_judge(
                self.config.reward.judge, self.lake, lambda: self.engine, lambda: self.tokenizer
            )
        return self._judge

    @property
    def engine_version(self) -> int:
        """The policy version the engine generates with: behind `policy_version` while
        an asynchronous update has published but not yet synced."""
        return self._engine_version if self._engine is not None else self.policy_version

    def load_policy_into_engine(self, version: int) -> None:
        """Policy `version`'s weights into the engine (version 0: the base model)."""
        hf = self.policies.hf_dir(version) if version else self.base_model
        if hf is None:
            pinned = self.policies.manifest.get("pinned", {})
            raise ValueError(
                f"policy v{version} of run {self.run_id} has no weights left (pruned; pinned: {pinned})"
            )
        self.engine.load_weights(hf)
        self._engine_version = version

    @property
    def trainer(self) -> GRPOTrainer:
        """The updates' trainer, once a flow has started it (`get_trainer`)."""
        if self._trainer is None:
            raise RuntimeError("the trainer is not started: the flow starts it (Runtime.get_trainer)")
        return self._trainer

    def get_trainer(self, start_engine: bool) -> GRPOTrainer:
        """The updates' trainer, built once. The caller says whether the engine starts first:
        a flow that also generates starts it first, since vLLM forks its workers before
        DeepSpeed sets up torch.distributed."""
        if self._trainer is None:
            if start_engine:
                self.engine  # noqa: B018  (start order matters)
            self._trainer = self.make_trainer()
        return self._trainer

    @property
    def teacher(self) -> Teacher | None:
        """On-policy distillation's teacher (policy/teacher.py), loaded on first use and kept;
        None when `distill.mode` is off."""
        if self._teacher is None and self.config.distill.mode != "off":
            from flywheel.policy.teacher import Teacher

            self._say(f"Loading the distillation teacher {self.config.distill.teacher} ...")
            self._teacher = Teacher(teacher_dir(self.config, self._say), self.config.distill)
        return self._teacher

    def make_trainer(self, learning_rate: float | None = None) -> GRPOTrainer:
        """A trainer on the run's current policy (its checkpoint, exactly, when it has one),
        held near `kl_reference()`, with `learning_rate` instead of the config's when given.
        Not kept: SFT trains one of its own, and RL then starts from SFT's export with a
        fresh optimizer, as a resumed run would."""
        from flywheel.policy.trainer import GRPOTrainer

        cfg = self.config.trainer
        if learning_rate is not None:
            cfg = cfg.model_copy(update={"learning_rate": learning_rate})
        checkpoint = self.policies.checkpoint()
        distill = self.config.distill  # its loss term; the teacher's scores come with the samples
        if checkpoint:  # weights and optimizer state, exactly
            trainer = GRPOTrainer(self.base_model, cfg, reference_dir=self.kl_reference(), distill=distill)
            trainer.load_checkpoint(*checkpoint)
            log.info("resumed the trainer from checkpoint %s in %s", checkpoint[1], checkpoint[0])
            return trainer
        return GRPOTrainer(self.policy_dir, cfg, reference_dir=self.kl_reference(), distill=distill)

    def kl_reference(self) -> str:
        """The policy `trainer.kl_coef` holds GRPO near: the run's SFT policy when it has one
        (a cold start, or `flywheel sft` into the run), else the base model. KL to the model
        RL starts from, as is usual after SFT: held to the base, a run with a cold start was
        pulled back from what SFT taught it (measured: bench/README.md, "GRPO only where SFT
        has no references"). Pinned, so it is never pruned and a resumed run gets the same."""
        sft = self.policies.manifest.get("pinned", {}).get("sft")
        return (self.policies.hf_dir(sft) if sft else None) or self.base_model

    def close(self) -> None:
        self.fanout.close()
        if self._engine is not None:
            self._engine.close()
        for env in self.domains:  # a domain's own sandboxes (harbor: its task images' pools)
            if callable(getattr(env, "close", None)):
                env.close()
        self.sandbox.close()


def _probe_job():
    from flywheel.environments.sandbox import Job

    return Job(["python", "-c", "print(6 * 7)"])
