"""The GRPO update on DeepSpeed ZeRO-3: one process on CPU (gloo), many with a launcher.

One `step` is one optimizer step over a batch of trajectories. The batch is sorted by
length and cut into `grad_accum_steps` micro-batches of similar token counts, which keeps
padding low; the loss is a token-mean over the whole batch (each micro-batch's sum is
divided by the batch's token count and multiplied back by the accumulation steps that
DeepSpeed divides by).

The optimizer is a client `torch.optim.AdamW`, so no DeepSpeed op has to compile.
Weights leave the trainer as a plain HF safetensors dir (`export`), which both the
engine and a later run load; DeepSpeed checkpoints (with optimizer state) make a killed
run resume exactly.
"""

from __future__ import annotations

import os
import shutil
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from policy.grpo import clipped_pg_loss, token_weights
from policy.logprobs import pad_batch, token_logprobs

WEIGHT_FILES = (".safetensors", ".bin", "model.safetensors.index.json")


@dataclass
class TrainSample:
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_distributed() -> str:
    """Single-process defaults, so the same code runs alone or under a launcher."""
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    warnings.filterwarnings("ignore", category=FutureWarning)
    import deepspeed

    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    return "cuda" if cuda else "cpu"


def micro_batches(samples: list[TrainSample], n: int) -> list[list[TrainSample]]:
    """`n` length-sorted chunks of near-equal token counts (some may be empty)."""
    ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
    total = sum(len(s.prompt_ids) + len(s.completion_ids) for s in ordered)
    chunks: list[list[TrainSample]] = [[] for _ in range(n)]
    acc = 0
    for s in ordered:
        idx = min(n - 1, acc * n // max(1, total))
        chunks[idx].append(s)
        acc += len(s.prompt_ids) + len(s.completion_ids)
    return chunks


class GRPOTrainer:
    def __init__(self, model_dir: str, cfg, ds_config: dict | None = None, reference_dir: str | None = None):
        """`reference_dir`: the frozen policy for the KL penalty (default `model_dir`);
        loaded only when `cfg.kl_coef` > 0."""
        self.device = _init_distributed()
        import deepspeed
        from transformers import AutoModelForCausalLM

        self.cfg = cfg
        self.model_dir = model_dir
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.config.use_cache = False
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.ds_config = ds_config or self.default_ds_config(cfg)
        self.engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=self.ds_config)
        self.reference = None
        if cfg.kl_coef > 0:
            ref = AutoModelForCausalLM.from_pretrained(reference_dir or model_dir, dtype=torch.float32)
            self.reference = ref.eval().requires_grad_(False).to(self.device)
        self.steps = 0

    @staticmethod
    def default_ds_config(cfg) -> dict:
        return {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": cfg.grad_accum_steps,
            "gradient_clipping": cfg.max_grad_norm,
            "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": False},
            "bf16": {"enabled": bool(cfg.bf16)},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
        }

    def step(self, samples: list[TrainSample]) -> dict:
        if not samples:
            raise ValueError("an update needs at least one trajectory")
        cfg = self.cfg
        gas = self.engine.gradient_accumulation_steps()
        per_sample = token_weights([len(s.completion_ids) for s in samples], cfg.loss_aggregation)
        weight_of = {id(s): w for s, w in zip(samples, per_sample)}
        loss_total, padded, real, stats_seen = 0.0, 0, 0, []
        self.engine.train()
        for chunk in micro_batches(samples, gas):
            scale = 1.0
            if not chunk:  # every micro-step must run (ZeRO-3 ranks step together)
                chunk, scale = samples[:1], 0.0
            seqs = [s.prompt_ids + s.completion_ids for s in chunk]
            ids, mask = pad_batch(seqs)
            ids, mask = ids.to(self.device), mask.to(self.device)
            new_lp = token_logprobs(self.engine, ids, mask)
            old_lp = torch.zeros_like(new_lp)
            weights = torch.zeros_like(new_lp)
            for i, s in enumerate(chunk):
                start = len(s.prompt_ids) - 1  # position t-1 predicts token t
                end = start + len(s.completion_ids)
                old_lp[i, start:end] = torch.tensor(s.old_logprobs, dtype=old_lp.dtype)
                weights[i, start:end] = weight_of[id(s)] * scale
            ref_lp = None
            if self.reference is not None:
                with torch.no_grad():
                    ref_lp = token_logprobs(self.reference, ids, mask)
            adv = torch.tensor([s.advantage for s in chunk], dtype=new_lp.dtype, device=new_lp.device)
            loss, stats = clipped_pg_loss(
                new_lp, old_lp, adv, weights, cfg.clip_eps_low, cfg.clip_eps_high, ref_lp, cfg.kl_coef
            )
            self.engine.backward(loss * gas)  # DeepSpeed divides by the accumulation steps
            self.engine.step()
            loss_total += loss.item()
            padded += ids.numel()
            real += int(mask.sum())
            stats_seen.append(stats)
        self.steps += 1
        metrics = {
            "loss": loss_total,
            "samples": len(samples),
            "completion_tokens": sum(len(s.completion_ids) for s in samples),
            "padding_fraction": 1 - real / max(1, padded),
        }
        for key in stats_seen[0]:
            metrics[key] = sum(st[key] for st in stats_seen) / len(stats_seen)
        return metrics

    @torch.no_grad()
    def logprobs(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        self.engine.eval()
        ids, mask = pad_batch(sequences)
        lps = token_logprobs(self.engine, ids.to(self.device), mask.to(self.device)).float().cpu()
        return [lps[i, p - 1 : len(s) - 1].tolist() for i, (s, p) in enumerate(zip(sequences, prompt_lens))]

    def export(self, out_dir: str | Path) -> str:
        """Gather the ZeRO-3 shards into a plain HF safetensors dir (with the tokenizer)."""
        import deepspeed

        out_dir = Path(out_dir)
        module = self.engine.module
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        if int(os.environ.get("RANK", "0")) == 0:
            tmp = out_dir.with_name(out_dir.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            module.save_pretrained(tmp, state_dict=state, safe_serialization=True)
            for f in Path(self.model_dir).iterdir():  # tokenizer, chat template, generation config
                if f.is_file() and not f.name.endswith(WEIGHT_FILES) and not (tmp / f.name).exists():
                    shutil.copy(f, tmp / f.name)
            shutil.rmtree(out_dir, ignore_errors=True)
            tmp.rename(out_dir)
        return str(out_dir)

    def save_checkpoint(self, ckpt_dir: str | Path, tag: str) -> None:
        self.engine.save_checkpoint(str(ckpt_dir), tag=tag)

    def load_checkpoint(self, ckpt_dir: str | Path, tag: str) -> None:
        path, _ = self.engine.load_checkpoint(str(ckpt_dir), tag=tag)
        if path is None:
            raise RuntimeError(f"no DeepSpeed checkpoint {tag!r} in {ckpt_dir}")


def prune_checkpoints(ckpt_dir: str | Path, keep_tag: str) -> None:
    """Each checkpoint holds optimizer state (3x the weights): keep only the current one."""
    for old in Path(ckpt_dir).iterdir():
        if old.is_dir() and old.name != keep_tag:
            shutil.rmtree(old, ignore_errors=True)
