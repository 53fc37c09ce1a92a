"""The DeepSpeed config the trainer starts from: policy/ds_zero3.json (or `trainer.ds_config`)
with the trainer's clipping and precision, and ZeRO-3's gradient bucket fitted to the model."""

from __future__ import annotations

import json
from pathlib import Path


def default_ds_config(cfg, bf16: bool) -> dict:
    """policy/ds_zero3.json (or `cfg.ds_config`), with the trainer's clipping, precision and
    ZeRO stage (`cfg.zero_stage`, when set):
    bf16 as autocast over float32 master weights (policy/trainer.py says why), never
    DeepSpeed's bf16 weights (whose export would be the bf16 rounding of the master)."""
    path = cfg.ds_config or str(Path(__file__).with_name("ds_zero3.json"))
    with open(path) as f:
        ds_config = json.load(f)
    ds_config["gradient_clipping"] = cfg.max_grad_norm
    ds_config["bf16"] = {**ds_config.get("bf16", {}), "enabled": False}
    ds_config["torch_autocast"] = {"enabled": bf16, "dtype": "bfloat16", "lower_precision_safe_modules": []}
    if cfg.zero_stage is not None:
        ds_config.setdefault("zero_optimization", {})["stage"] = cfg.zero_stage
    return ds_config


def zero_stage(ds_config: dict) -> int:
    return int(ds_config.get("zero_optimization", {}).get("stage", 0))


def layout(stage: int) -> str:
    """A ZeRO stage's checkpoint layout: stages 1 and 2 write the same files."""
    return "3" if stage == 3 else "1-2" if stage else "0"


def checkpoint_layout(names: list[str]) -> str | None:
    """The layout that wrote a DeepSpeed checkpoint, from its file names (DeepSpeed's own
    naming): per-rank model states only at stage 3, per-rank optimizer states ("zero_pp_rank",
    "bf16_" in front with DeepSpeed's bf16 section) at stages 1-3. None: no checkpoint files."""
    ranked = [n for n in names if "zero_pp_rank" in n]
    if not names:
        return None
    return "3" if any(n.endswith("_model_states.pt") for n in ranked) else "1-2" if ranked else "0"


def fit_buckets(ds_config: dict, trainable: list) -> dict:
    """ZeRO-3's gradient bucket no larger than what trains. DeepSpeed's default
    (reduce_bucket_size 5e8 elements) allocates a 2 GB float32 buffer per engine whatever
    the model; for the 135M default that is 1.4 GB reserved and never used, and a process
    holding a few such engines is refused a fork on a 16 GB machine. A size the config
    sets is kept."""
    zero = ds_config.setdefault("zero_optimization", {})
    if "reduce_bucket_size" not in zero:
        zero["reduce_bucket_size"] = int(min(5e8, max(1, sum(p.numel() for p in trainable))))
    return ds_config
