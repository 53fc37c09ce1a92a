"""The GRPO update on DeepSpeed ZeRO-3: one process on CPU (gloo), many with a launcher.
On one process `trainer.zero_stage: 0` runs DeepSpeed without sharding (nothing to shard there).

One `step` is one optimizer step over a batch of trajectories. Each rank takes its share
and packs it into micro-batches of at most `micro_batch_tokens` padded tokens
(policy/batching.py); with `share_prompt` a group's samples run their common prompt once.
DeepSpeed runs with
`managed_gradient_accumulation: false`: every micro-batch's backward accumulates, and
the one `step()` reduces and updates, so the number of micro-batches can vary per
update. Ranks pad their count of each kind of micro-batch to the largest (ZeRO-3 needs
every rank in every forward). Loss weights are computed over the whole batch, so the update is the
same whatever the budget or the number of ranks (tests/test_trainer.py checks it).

The optimizer is a client `torch.optim.AdamW`, so no DeepSpeed op has to compile. Weights
leave as a plain HF safetensors dir (`export`), which the engine and a later run load;
DeepSpeed checkpoints (with optimizer state) make a killed run resume exactly. With
`cfg.lora` only PEFT adapters train (policy/lora.py); the export merges them in and holds
them alone too.

Samples whose old logprobs are not the trainer's own (an older policy's, or an engine's
with other numerics, e.g. bf16 rollouts) are clipped against the trainer's current
logprobs and weighted by the truncated importance ratio (policy/grpo.py).

On-policy distillation (`distill`, a DistillConfig with mode "only" or "add"): every sample
carries its teacher's logprobs (`teacher_logprobs`, scored by policy/teacher.py in the update
stage), and the loss gets the reverse-KL term of policy/grpo.py, alone (the samples'
advantages zeroed) or added to GRPO's with `distill.weight`. Without it the loss is GRPO's,
unchanged.

Long sequences (policy/chunked.py, policy/memory.py): logits beyond `logits_chunk_tokens` come a
chunk at a time; a sample longer than the budget trains alone, checkpointed. `peak_rss_gib`: the step's.

Precision (`cfg.bf16`, `uses_bf16`): bf16 is DeepSpeed's `torch_autocast` section, not its
`bf16` one. Under autocast the parameters stay float32 and are the master weights: ZeRO-3
partitions, gathers, checkpoints and exports them as float32, the AdamW state is float32,
and only the matmuls (Linear, attention) run in bf16. DeepSpeed's `bf16` section also keeps
float32 master partitions in its optimizer, but its module holds bf16 weights, so `export`
(and the engine, and a run continued from the export) got the bf16 rounding, not the
master (checked on the tiny model: q_proj off by 1e-4). The logits are cast to float32
before log-softmax and gather (policy/logprobs.py), so every logprob, ratio and loss is a
float32 reduction. Not done: bf16 gradient communication (DeepSpeed's
`lower_precision_safe_modules`; left empty, so gradients are reduced in float32: the
saving is bandwidth between GPUs, nothing on one process).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from flywheel.policy import lora
from flywheel.policy.batching import MicroBatch, device_min_shared_prompt, plan, rank_share
from flywheel.policy.chunked import micro_batch_logprobs, set_checkpointing
from flywheel.policy.distributed import init_distributed, max_over_ranks
from flywheel.policy.ds_config import checkpoint_layout, default_ds_config, fit_buckets, layout, zero_stage
from flywheel.policy.export import plain_state, write_export
from flywheel.policy.grpo import (
    clipped_pg_loss,
    decoupled_importance,
    nll_loss,
    reverse_kl_loss,
    token_weights,
)
from flywheel.policy.logprobs import pad_batch, token_logprobs
from flywheel.policy.memory import PeakMemory, return_freed_memory

WEIGHT_FILES = (".safetensors", ".bin", "model.safetensors.index.json")


@dataclass
class TrainSample:
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    policy_lag: int = 0  # updates between the policy that sampled it and the trainer's
    # sampled with other numerics than the trainer's (bf16 rollouts): its old logprobs are
    # a behaviour policy's, corrected like a stale sample's
    engine_mismatch: bool = False
    # the teacher's logprob of each completion token (on-policy distillation); None without one
    teacher_logprobs: list[float] | None = None

    @property
    def behaviour_differs(self) -> bool:
        return self.policy_lag > 0 or self.engine_mismatch


def model_tokens(sample: TrainSample) -> int:
    """Completion tokens the policy sampled. A NaN old logprob marks an observation token
    of a multi-turn trajectory (tool output, chat markup; see tasks/multiturn.py): it is
    conditioned on but never trained on."""
    return sum(1 for lp in sample.old_logprobs if not math.isnan(lp))


def place_completions(
    chunk: list[TrainSample],
    old_lp: torch.Tensor,
    weights: torch.Tensor,
    scales: list[float],
    shared: bool = False,
) -> None:
    """Write each sample's old logprobs and loss weights at its completion positions
    (position t-1 predicts token t; in a shared-prompt micro-batch position j holds
    completion token j). Observation tokens (NaN) get weight 0 and old logprob 0, so they
    drop out of the loss, the clip statistics and the KL term."""
    for i, (s, w) in enumerate(zip(chunk, scales)):
        start = 0 if shared else len(s.prompt_ids) - 1
        end = start + len(s.completion_ids)
        old = torch.tensor(s.old_logprobs, dtype=old_lp.dtype)
        old_lp[i, start:end] = torch.nan_to_num(old, nan=0.0)
        weights[i, start:end] = w * (~torch.isnan(old)).to(weights.dtype)


def place_teacher(chunk: list[TrainSample], teacher_lp: torch.Tensor, shared: bool = False) -> None:
    """Each sample's teacher logprobs at its completion positions, as `place_completions`
    places the old ones. A padding forward's sample (loss scaled to 0) may have none."""
    for i, s in enumerate(chunk):
        if s.teacher_logprobs is not None:
            start = 0 if shared else len(s.prompt_ids) - 1
            end = start + len(s.completion_ids)
            teacher_lp[i, start:end] = torch.tensor(s.teacher_logprobs, dtype=teacher_lp.dtype)


def uses_bf16(cfg) -> bool:
    """Whether the trainer computes in bf16: `cfg.bf16` when set; else where the hardware has
    bf16 units: a GPU that supports it, or a CPU with AMX or AVX512-BF16 (held-out learning at
    equal wall time measured as float32's: bench/README.md, "the trainer's bf16 against float32")."""
    if cfg.bf16 is not None:
        return cfg.bf16
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return cpu_has_bf16_units()


def cpu_has_bf16_units() -> bool:
    """AMX or AVX512-BF16 in the CPU's flags (Linux). Elsewhere False: bf16 emulated in float32
    units is slower than float32, and no other platform is measured. FLYWHEEL_CPU_BF16=0 says
    no (the test suite sets it, so that tests asserting float32 numerics get them on any CPU;
    the bf16 paths have tests that ask for bf16)."""
    if os.environ.get("FLYWHEEL_CPU_BF16", "").strip() == "0":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(amx_bf16|avx512_bf16)\b", flags))


class GRPOTrainer:
    def __init__(
        self,
        model_dir: str,
        cfg,
        ds_config: dict | None = None,
        reference_dir: str | None = None,
        distill=None,
    ):
        """`reference_dir`: the frozen policy for the KL penalty (default `model_dir`);
        loaded only when `cfg.kl_coef` > 0. `distill`: a DistillConfig (on-policy
        distillation, its mode and weight); None or mode "off": GRPO alone."""
        self.device = init_distributed()
        import deepspeed
        from transformers import AutoModelForCausalLM

        self.cfg = cfg
        self.model_dir = model_dir
        # The tokenizer, chat template and generation config, kept for every export: the dir
        # we started from may be an older policy version that the policy store prunes while
        # we train (a run resumed, or continued after SFT, at version v loses v's dir after
        # `keep_hf` more updates).
        self.assets = {f.name: f.read_bytes() for f in Path(model_dir).iterdir()
                       if f.is_file() and not f.name.endswith(WEIGHT_FILES)}  # fmt: skip
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.config.use_cache = False
        if cfg.lora is not None:  # only the adapters train; the frozen weights are model_dir's
            lora.check_targets(model_dir, cfg.lora, model)
            model = lora.wrap(model, cfg.lora)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.ds_config = fit_buckets(ds_config or default_ds_config(cfg, uses_bf16(cfg)), trainable)
        self.stage = zero_stage(self.ds_config)
        if self.stage == 0 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError(
                f"trainer.zero_stage 0 is for one process; with {os.environ['WORLD_SIZE']} ranks "
                "the update runs ZeRO-3 (zero_stage 3 or empty)"
            )
        self.engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=self.ds_config)
        self.bf16 = bool(self.ds_config.get("torch_autocast", {}).get("enabled"))  # a given ds_config's say
        self.reference = None
        if cfg.kl_coef > 0:
            ref = AutoModelForCausalLM.from_pretrained(reference_dir or model_dir, dtype=torch.float32)
            self.reference = ref.eval().requires_grad_(False).to(self.device)
        self.distill = distill if distill is not None and distill.mode != "off" else None
        self.steps = 0

    def step(self, samples: list[TrainSample], objective: str = "grpo") -> dict:
        """One optimizer step. objective "grpo": the clipped policy-gradient loss with the
        samples' advantages; "sft": the likelihood of the completions (advantages unused)."""
        if objective not in ("grpo", "sft"):
            raise ValueError(f"objective must be 'grpo' or 'sft', not {objective!r}")
        if not samples:
            raise ValueError("an update needs at least one trajectory")
        cfg = self.cfg
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        per_sample = token_weights([model_tokens(s) for s in samples], cfg.loss_aggregation)
        weight_of = {id(s): w for s, w in zip(samples, per_sample)}
        share_from = self.min_shared_prompt()
        mine = rank_share(samples, rank, world, share_from is not None)
        if self.distill is not None and objective == "grpo":
            unscored = sum(1 for s in mine if len(s.teacher_logprobs or ()) != len(s.completion_ids))
            if unscored:
                raise ValueError(
                    f"distill.mode {self.distill.mode!r}: {unscored} samples lack teacher logprobs for every "
                    "completion token (the update stage scores them: policy/teacher.py)"
                )
        batches = plan(mine, cfg.micro_batch_tokens, share_from)
        # every rank runs every forward (ZeRO-3 gathers parameters in it): pad each kind
        # (a shared-prompt micro-batch runs two) to the most any rank has
        forwards = []
        for kind in (True, False):
            of_kind = [b for b in batches if b.shared_prompt == kind]
            missing = max_over_ranks(len(of_kind)) - len(of_kind)
            forwards += of_kind + [MicroBatch.padding(samples, kind)] * missing
        loss_total, padded, real, stats_seen = 0.0, 0, 0, []
        self.engine.train()
        peak = PeakMemory(self.device)
        with self._weights_cast_once():
            for batch in forwards:
                long = not batch.shared_prompt and batch.tokens()[1] > cfg.micro_batch_tokens
                checkpointed = cfg.gradient_checkpointing
                set_checkpointing(self.engine, long if checkpointed is None else checkpointed)
                return_freed_memory(long and self.device == "cpu")
                # DeepSpeed averages gradients over ranks; we want the sum
                scales = [weight_of[id(s)] * (float(world) if batch.counts else 0.0) for s in batch.samples]
                loss, stats = self._loss(batch, scales, objective)
                with torch.autocast(self.device, enabled=False):  # backward outside autocast, as torch asks
                    self.engine.backward(loss, scale_wrt_gas=False)
                loss_total += loss.item() / world
                if batch.counts:
                    r, p = batch.tokens()
                    real, padded = real + r, padded + p
                stats_seen.append(stats)
        return_freed_memory(False)
        self.engine.step()
        self.steps += 1
        metrics = {
            "loss": loss_total,
            "samples": len(samples),
            "micro_batches": len(forwards),
            "shared_prompt_micro_batches": sum(b.shared_prompt for b in forwards),
            "completion_tokens": sum(len(s.completion_ids) for s in samples),
            "tokens": real,  # on this rank, padding excluded
            "padding_fraction": 1 - real / max(1, padded),
        }
        for key in {k for st in stats_seen for k in st}:  # is_weight_mean: only chunks with stale samples
            seen = [st[key] for st in stats_seen if key in st]
            metrics[key] = sum(seen) / len(seen)
        metrics["off_policy_samples"] = sum(1 for s in samples if s.policy_lag > 0)
        metrics["engine_mismatch_samples"] = sum(1 for s in samples if s.engine_mismatch)
        return {**metrics, **peak.read()}

    def _loss(self, batch: MicroBatch, scales: list[float], objective: str) -> tuple[torch.Tensor, dict]:
        """One micro-batch's loss (each sample's tokens weighted by its scale) and its statistics."""
        cfg, chunk = self.cfg, batch.samples
        new_lp = self._logprobs(self.engine, batch)
        old_lp = torch.zeros_like(new_lp)
        weights = torch.zeros_like(new_lp)
        place_completions(chunk, old_lp, weights, scales, batch.shared_prompt)
        if objective == "sft":
            return nll_loss(new_lp, weights)
        ref_lp = None
        if self.reference is not None:  # in the policy's numerics, so KL starts at 0
            with torch.no_grad(), torch.autocast(self.device, torch.bfloat16, enabled=self.bf16):
                ref_lp = self._logprobs(self.reference, batch)
        adv = torch.tensor([s.advantage for s in chunk], dtype=new_lp.dtype, device=new_lp.device)
        if self.distill is not None and self.distill.mode == "only":
            adv = torch.zeros_like(adv)  # the teacher's term is the signal (a reference KL stays)
        is_w = None
        if cfg.off_policy_correction == "truncated_is" and any(s.behaviour_differs for s in chunk):
            stale = torch.tensor([s.behaviour_differs for s in chunk], device=new_lp.device)
            old_lp, is_w = decoupled_importance(new_lp, old_lp, stale, cfg.is_cap)
        loss, stats = clipped_pg_loss(
            new_lp, old_lp, adv, weights, cfg.clip_eps_low, cfg.clip_eps_high, ref_lp, cfg.kl_coef, is_w
        )
        if self.distill is not None:
            teacher_lp = torch.zeros_like(new_lp)
            place_teacher(chunk, teacher_lp, batch.shared_prompt)
            term, term_stats = reverse_kl_loss(
                new_lp, old_lp, teacher_lp, weights, cfg.clip_eps_low, cfg.clip_eps_high, is_w
            )
            loss = loss + self.distill.weight * term
            stats.update({f"distill_{k}": v for k, v in term_stats.items()})
        return loss, stats

    def _weights_cast_once(self):
        """Under bf16, one region of autocast over the whole step when the weights are whole
        (ZeRO stage 0): autocast keeps its bf16 copy of each float32 weight until its outermost
        region ends, so every micro-batch's forward reuses the first one's cast instead of
        making its own (the same numbers; tests/test_trainer_stage.py). Not under ZeRO-3, whose
        weights are gathered and released per layer: there it would hold a bf16 copy of the
        whole model on every rank."""
        if not self.bf16 or self.stage == 3:  # only ZeRO-3 splits the weights themselves
            return contextlib.nullcontext()
        return torch.autocast(self.device, torch.bfloat16)

    def min_shared_prompt(self) -> int | None:
        """The shortest prompt whose group runs it once (None: never). `share_prompt`
        empty: the device's default (policy/batching.py:device_min_shared_prompt). Never
        under activation checkpointing, which drops the prompt's key/value cache."""
        if self.cfg.gradient_checkpointing:
            return None
        if self.cfg.share_prompt is not None:
            return 0 if self.cfg.share_prompt else None
        return device_min_shared_prompt(self.device)

    def _logprobs(self, model, batch: MicroBatch) -> torch.Tensor:
        """A micro-batch's logprobs under `model`, in its kind's layout (place_completions)."""
        return micro_batch_logprobs(model, batch, self.device, self.cfg.logits_chunk_tokens, self.bf16)

    @torch.no_grad()
    def logprobs(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        self.engine.eval()
        ids, mask = pad_batch(sequences)
        lps = token_logprobs(self.engine, ids.to(self.device), mask.to(self.device)).float().cpu()
        return [lps[i, p - 1 : len(s) - 1].tolist() for i, (s, p) in enumerate(zip(sequences, prompt_lens))]

    def export(self, out_dir: str | Path) -> str:
        """Gather the ZeRO-3 shards into a plain HF safetensors dir (with the tokenizer).
        With LoRA the weights have the adapter merged in, and `adapter/` holds it alone."""
        import deepspeed

        out_dir = Path(out_dir)
        module = self.engine.module
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
            plain, state, peft_state = plain_state(module, state, self.cfg.lora is not None)
        if int(os.environ.get("RANK", "0")) == 0:
            write_export(out_dir, module, plain, state, peft_state, self.assets)
        return str(out_dir)

    def save_checkpoint(self, ckpt_dir: str | Path, tag: str) -> None:
        self.engine.save_checkpoint(str(ckpt_dir), tag=tag)

    def load_checkpoint(self, ckpt_dir: str | Path, tag: str) -> None:
        written = checkpoint_layout([f.name for f in (Path(ckpt_dir) / tag).glob("*.pt")])
        if written is not None and written != layout(self.stage):
            to_use = (
                "a DeepSpeed config at stage 1 or 2" if written == "1-2" else f"trainer.zero_stage: {written}"
            )
            raise RuntimeError(
                f"checkpoint {tag!r} in {ckpt_dir} was written at ZeRO stage {written}, and this trainer runs "
                f"stage {self.stage}: resume it with {to_use}"
            )
        path, _ = self.engine.load_checkpoint(str(ckpt_dir), tag=tag)
        if path is None:
            raise RuntimeError(f"no DeepSpeed checkpoint {tag!r} in {ckpt_dir}")
