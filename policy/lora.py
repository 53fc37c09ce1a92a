"""LoRA adapters through PEFT for the trainer (policy/trainer.py), with `trainer.lora` set.

Why a module of its own: three things differ from full fine-tuning and each is easy to
get subtly wrong.

- **Which modules.** `target_modules` are matched the way PEFT matches them (a module's
  full name, or its last dotted parts); every name given must match something, so a typo
  stops the run at start-up (`check_targets`, on a meta-device model: no weights load)
  with the names that do exist, instead of PEFT training the others silently.
- **What the engine loads.** vLLM gets the adapter merged into the weights
  (W + scaling * B @ A, from PEFT's own `get_delta_weight`), so weight sync, the probe and
  every engine stay exactly as with full fine-tuning. The export also holds the adapter
  alone under `adapter/` (PEFT's format), for users who serve adapters.
- **Resume** needs nothing of its own: DeepSpeed's ZeRO-3 checkpoint holds the frozen
  weights beside the adapter and its optimizer state, so a trainer built from any dir of
  the model and then loaded is the saved one exactly (tests/test_lora.py builds it from
  other weights).

Not done: loading the adapter into vLLM as a LoRA adapter instead of merging (vLLM's
`enable_lora`; the merge costs one export, the same as full fine-tuning), QLoRA, PEFT
methods other than LoRA, and sparing the KL reference's copy of the model (`kl_coef` > 0
loads one, as with full fine-tuning; PEFT's `disable_adapter` could stand in for it when
the reference is the adapter's base).
"""

from __future__ import annotations

import re

import torch

ADAPTER_DIR = "adapter"  # inside an exported HF dir


class LoraTargetError(ValueError):
    """`trainer.lora.target_modules` names a module the model does not have."""


def peft_config(cfg):
    """A PEFT LoraConfig from the trainer's `lora` section (flywheel/config/training.py)."""
    from peft import LoraConfig

    targets = cfg.target_modules
    return LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules="all-linear" if targets == ["all-linear"] else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )


def adaptable_names(model: torch.nn.Module) -> list[str]:
    """The last name part of every Linear and Embedding module, e.g. q_proj, lm_head."""
    kinds = (torch.nn.Linear, torch.nn.Embedding)
    return sorted(
        {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if name and isinstance(m, kinds)}
    )


def check_targets(model_dir: str, cfg, model: torch.nn.Module | None = None) -> None:
    """Raise LoraTargetError unless every target module matches a module of `model` (by
    default the model in `model_dir`, built on the meta device: the config is read, no
    weights), by PEFT's own matching rule."""
    if cfg.target_modules == ["all-linear"]:
        return
    from peft.tuners.tuners_utils import check_target_module_exists

    if model is None:
        from transformers import AutoConfig, AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    names = [name for name, _ in model.named_modules() if name]
    one = {t: peft_config(cfg.model_copy(update={"target_modules": [t]})) for t in cfg.target_modules}
    missing = [t for t, c in one.items() if not any(check_target_module_exists(c, n) for n in names)]
    if missing:
        raise LoraTargetError(
            f"trainer.lora.target_modules {missing} match no module of {model_dir}; its linear and "
            f"embedding modules are: {', '.join(adaptable_names(model))} (or give ['all-linear'])"
        )


def wrap(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """The model with LoRA adapters; only the adapters require grad."""
    from peft import get_peft_model

    return get_peft_model(model, peft_config(cfg))


_PREFIX = re.compile(r"^base_model\.model\.")


def merged_state(module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The plain model's state dict with every adapter merged into its base weight, from
    `state` (the PEFT model's full state dict, gathered) and `module` (the PEFT model,
    its parameters gathered too: PEFT computes each layer's delta)."""
    from peft.tuners.lora import LoraLayer

    merged = {k: v for k, v in state.items() if ".lora_" not in k}
    for name, layer in module.named_modules():
        if isinstance(layer, LoraLayer):
            for adapter in layer.active_adapters:
                key = f"{name}.base_layer.weight"
                merged[key] = merged[key] + layer.get_delta_weight(adapter).detach().cpu().to(
                    merged[key].dtype
                )
    return {_PREFIX.sub("", k).replace(".base_layer.", "."): v for k, v in merged.items()}
