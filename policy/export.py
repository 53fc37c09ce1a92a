"""Writing a policy export: a plain Hugging Face safetensors dir with the tokenizer's files,
and with LoRA the adapter merged in and alone under `adapter/`. One writer for both
trainers (ZeRO-3's after gathering its shards, the plain-torch one as it is); written to a
`.partial` dir renamed at the end, so a reader never sees half an export."""

from __future__ import annotations

import shutil
from pathlib import Path

from flywheel.policy import lora


def plain_state(module, state: dict, use_lora: bool):
    """(model to save, its state, the adapter's state or None) from a full state dict."""
    peft_state = None
    if use_lora:
        peft_state, state = state, lora.merged_state(module, state)
    plain = module.get_base_model() if peft_state is not None else module
    if getattr(plain.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # the clones are no longer shared: keep one copy
    return plain, state, peft_state


def write_export(out_dir: Path, module, plain, state: dict, peft_state: dict | None, assets: dict) -> str:
    """Save `plain` with `state` (and the adapter) plus `assets` (tokenizer, chat template,
    generation config: name -> bytes) into out_dir, replacing what was there."""
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp, state_dict=state, safe_serialization=True)
    if peft_state is not None:
        module.save_pretrained(tmp / lora.ADAPTER_DIR, state_dict=peft_state, safe_serialization=True)
    for name, data in assets.items():
        if not (tmp / name).exists():
            (tmp / name).write_bytes(data)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return str(out_dir)
