"""The update's sections of the config (flywheel/config/__init__.py): the trainer (GRPO/SFT with
DeepSpeed, policy/trainer.py), on-policy distillation from a teacher (policy/teacher.py) and the
pipeline that overlaps the update with rollouts (flywheel/run/pipeline.py). Kept apart so
config.py stays readable; `flywheel.config` still exports them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from flywheel.config.section import Section


class LoraConfig(Section):
    """LoRA adapters (PEFT) instead of full fine-tuning; policy/lora.py."""

    r: int = Field(16, ge=1, description="The adapters' rank.")
    alpha: float = Field(32.0, gt=0, description="Scaling: the update is alpha / r * B @ A.")
    dropout: float = Field(
        0.0, ge=0, lt=1,
        description="On the adapters' input. Above 0 the trainer's logprobs are noisy against the "
        "engine's, so GRPO's ratio is not 1 on fresh samples.",
    )  # fmt: skip
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Module names (or their last dotted parts) to adapt; ['all-linear'] for every "
        "linear layer but the output head. A name that matches nothing stops the run at start-up.",
    )


class TrainerConfig(Section):
    learning_rate: float = Field(
        2e-5, description="The recipes' rate for the 135M default (1e-6 barely moved it)."
    )
    weight_decay: float = 0.0
    clip_eps_low: float = 0.2
    clip_eps_high: float = Field(0.28, description="DAPO's clip-higher.")
    loss_aggregation: Literal["token_mean", "seq_mean"] = "token_mean"
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="KL penalty (k3 estimator) to the policy GRPO starts from: the run's SFT policy "
        "when it has one (cold start or `flywheel sft`), else the base model.",
    )
    micro_batch_tokens: int = Field(
        2048,
        ge=1,
        description="Padded tokens per micro-batch; gradients accumulate over them. Short samples are "
        "packed up to it, none is split: one longer than it trains alone.",
    )
    logits_chunk_tokens: int | None = Field(
        2048,
        ge=1,
        description="A micro-batch whose logits would cover more rows x positions than this gets them "
        "a chunk at a time (policy/chunked.py): the same loss, never a long sequence's whole "
        "[positions, vocabulary] logits. At the default budget only samples longer than it are "
        "chunked. Empty: never.",
    )
    gradient_checkpointing: bool | None = Field(
        None,
        description="Activation checkpointing of the decoder layers (backward runs each forward again: "
        "about a third more compute, a layer's input kept instead of its activations). Empty: only "
        "for micro-batches beyond micro_batch_tokens (a sample longer than the budget). true turns "
        "share_prompt off (a prompt's key/value cache does not survive it).",
    )
    share_prompt: bool | None = Field(
        None,
        description="Run a prompt once for all its samples in an update (the group's completions on one "
        "key/value cache) instead of once per sample: the same loss on fewer tokens. Empty: always on "
        "CPU; on a GPU for prompts of 1024+ tokens, where it measured faster.",
    )
    ds_config: str | None = Field(
        None, description="A DeepSpeed JSON config (default: policy/ds_zero3.json)."
    )
    zero_stage: Literal[0, 3] | None = Field(
        None,
        description="DeepSpeed's ZeRO stage, over the DeepSpeed config's. 3 shards the weights, gradients "
        "and optimizer state over the ranks. 0 shards nothing: for one process, where ZeRO-3 has "
        "nothing to shard yet gathers, releases and partitions every micro-batch (the update step 2x "
        "faster and half the memory at 0 on the 2-core CPU: bench/README.md); with several ranks only 3. "
        "Empty: the DeepSpeed config's (policy/ds_zero3.json: 3).",
    )
    max_grad_norm: float = 1.0
    drop_zero_variance_groups: bool = Field(
        True, description="Groups whose rewards are all equal carry no GRPO signal."
    )
    bf16: bool | None = Field(
        None,
        description="Train in bf16: the matmuls in bf16 (autocast), the weights, the optimizer state and "
        "every logprob and loss in float32 (policy/trainer.py). About 2x faster on a CPU with bf16 units "
        "(AMX, AVX512-BF16; bench/roofline.py); the engine then scores other numerics than the trainer's, "
        "corrected like bf16 rollouts (correct_engine_mismatch). Empty: bf16 where the hardware has it "
        "(a GPU that supports it, a CPU with AMX or AVX512-BF16; held-out learning at equal wall time "
        "measured as float32's), float32 elsewhere.",
    )
    save_checkpoints: bool = True
    off_policy_correction: Literal["truncated_is", "none"] = Field(
        "truncated_is",
        description="Samples from an older policy (pipeline.max_policy_lag > 0): clip against the "
        "current policy and weight by min(pi_current / pi_behaviour, is_cap).",
    )
    is_cap: float = Field(2.0, gt=0, description="Truncation of the importance weight of off-policy tokens.")
    correct_engine_mismatch: bool | None = Field(
        None,
        description="Apply off_policy_correction to every sample, not only stale ones: the engine's "
        "logprobs come from other numerics than the trainer's (bf16 rollouts beside an fp32 trainer), "
        "so they are a behaviour policy's. Empty: on when engine.dtype is not float32 or the trainer "
        "computes in bf16.",
    )
    lora: LoraConfig | None = Field(
        None,
        description="Train LoRA adapters, not every weight (give a learning rate about 10x the full one); "
        "the engine gets them merged, the export holds both.",
    )

    @model_validator(mode="after")
    def _sharing_survives_checkpointing(self):
        if self.share_prompt and self.gradient_checkpointing:
            raise ValueError(
                "share_prompt: true needs gradient_checkpointing off or empty (transformers drops the "
                "prompt's key/value cache under checkpointing)"
            )
        return self


class DistillConfig(Section):
    """On-policy distillation: a teacher scores the student's own samples token by token in the
    update stage (policy/teacher.py), and the per-token reverse KL on the sampled tokens
    (policy/grpo.py:reverse_kl_loss) is the training signal, alone or beside GRPO's."""

    mode: Literal["off", "only", "add"] = Field(
        "off",
        description="off: GRPO alone. only: the reverse KL to the teacher is the whole signal (per-token "
        "advantage -(logp_student - logp_teacher)); add: GRPO's loss + weight * that term. With a "
        "teacher, groups of equal rewards are trained on too (they still carry the teacher's signal).",
    )
    teacher: str | None = Field(
        None,
        description="The teacher: a local HF model dir or a Hub name in the local cache; it must use the "
        "student's tokenizer (the same vocabulary), which start-up checks. Empty: none (mode must be off).",
    )
    weight: float = Field(1.0, gt=0, description="Weight of the distillation term in the loss.")
    dtype: Literal["bfloat16", "float32"] = Field(
        "bfloat16", description="The teacher's weights and matmuls; its logprobs are float32 reductions."
    )
    batch_tokens: int = Field(
        2048,
        ge=1,
        description="The teacher's memory budget: padded tokens per forward. Its logits take about "
        "10 bytes x vocabulary per completion token (1.5 GB at 1024 tokens of Qwen's 152k vocabulary).",
    )
    device: str = Field(
        "auto", description="Where the teacher runs: auto (cuda when there is one), cpu, cuda:1, ..."
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value):  # YAML 1.1 reads a bare `off` (a recipe, `--set distill.mode=off`) as false
        return "off" if value is False else value

    @model_validator(mode="after")
    def _teacher_when_on(self):
        if self.mode != "off" and not self.teacher:
            raise ValueError(f"distill.mode {self.mode!r} needs distill.teacher (a model dir or Hub name)")
        return self


class PipelineConfig(Section):
    max_policy_lag: int = Field(
        0, ge=0, le=4,
        description="0: synchronous (rollouts wait for each update). N > 0: the rollouts of the next "
        "cycle run while the update trains, on a policy at most N updates behind.",
    )  # fmt: skip
