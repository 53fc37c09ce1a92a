"""A short bf16 cycle of the 0.5B model on one GPU: rollout tokens/s, update MFU, weight-sync time.

    python bench/gpu_check.py [--model DIR] [--out FILE]    # a lent GPU machine (bench/gpu_check.sh)
    python bench/gpu_check.py --dry-run                     # CPU, tiny random model, 1 step (CI)

Made for a machine that has torch, transformers and peft and nothing else of the project's
stack: no vLLM (its wheel is too big to carry there), no DeepSpeed, no pydantic, no Prefect,
and no installed checkout (the namespace is mapped here as pyproject maps it). So it uses:

- the engine: vLLM when it is installed, else the transformers engine
  (policy/engines/hf_engine.py, on the GPU); the report says which and why;
- the trainer: GRPOTrainer's step on plain torch (policy/plain_trainer.py: bf16 autocast
  over float32 master weights and AdamW state, no ZeRO);
- weight sync as the run does it: the trainer exports a safetensors dir, the engine loads it.

The model: `--model DIR` (a local HF dir, e.g. the prepared qwen2.5-coder-0.5b, or a shipped
name where the project is installed), else random weights in Qwen2.5-Coder-0.5B-Instruct's
shapes (24 layers, d=896, its 151,936-token vocabulary and its own output matrix: 630M
parameters, as prepared) with a byte-level tokenizer: the prepared weights (1.2 GB) do not
travel to a lent machine, and throughput does not depend on what the weights say. Random
weights almost never end a sample, so every sample runs to --max-tokens.

MFU counts 6 x parameters x tokens per update step (forward and backward, no attention
term, as bench/gpu_report.py), against the device's dense bf16 peak (PEAK_BF16_TFLOPS, from
its name; --peak-tflops overrides). Prompts for a real model are a few coding requests in
its chat template; for random weights, random byte tokens.

Not done: the sandbox and the verifiers (no bubblewrap there, and they run on CPU anyway),
the lake, Prefect; several GPUs.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent

# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, from NVIDIA's data sheets; the first
# name contained in the device's name wins, so the longer names come first.
PEAK_BF16_TFLOPS = (
    ("H200 NVL", 835.0), ("H200", 989.0), ("GH200", 989.0), ("H100 NVL", 835.0), ("H100 PCIe", 756.0),
    ("H100", 989.0), ("H800", 989.0), ("A100", 312.0), ("A800", 312.0),
)  # fmt: skip

QWEN_05_SHAPES = dict(
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, vocab_size=151_936, max_position_embeddings=32768, rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)  # fmt: skip
TINY_SHAPES = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=1, vocab_size=259, max_position_embeddings=512, rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)  # fmt: skip
REQUESTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that counts the words in a text.",
    "Write a Python function that returns the prime factors of an integer.",
    "Write a Python function that flattens a nested list.",
    "Write a Python function that parses a date like 2024-03-01 into a tuple of ints.",
    "Write a Python function that returns the longest common prefix of a list of strings.",
]


def use_checkout() -> None:
    """`flywheel.policy` importable from this checkout when the project is not installed:
    pyproject maps the folder policy/ to flywheel.policy, so the repository root joins the
    package's path (its other folders map the same way)."""
    if importlib.util.find_spec("flywheel") is None:
        sys.path.insert(0, str(ROOT))
    import flywheel

    if importlib.util.find_spec("flywheel.policy") is None:
        flywheel.__path__.append(str(ROOT))
    flywheel.use_offline_defaults()


def peak_tflops(device_name: str) -> float | None:
    name = device_name.lower()
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key.lower() in name), None)


def pick_engine(choice: str, dry_run: bool) -> tuple[str, str]:
    """(backend, why)."""
    if choice != "auto":
        return choice, "asked for"
    try:
        have_vllm = importlib.util.find_spec("vllm") is not None
    except ImportError:  # a broken or blocked install
        have_vllm = False
    if not have_vllm:
        return "hf", "vLLM is not installed"
    if dry_run:
        return "hf", "dry run (vLLM's start-up alone is longer than the dry run)"
    return "vllm", "vLLM is installed"


def byte_tokenizer():
    """A byte-level BPE without merges (256 byte tokens + 3 specials), built in memory."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )  # fmt: skip


def random_model(out: Path, shapes: dict, seed: int = 0) -> str:
    """A Qwen2 model dir of random weights (bf16, as the prepared models are stored)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = byte_tokenizer()
    tok.save_pretrained(out)
    config = Qwen2Config(**shapes, bos_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # initialising 630M weights is slow on CPU
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return str(out)


def resolve(model: str) -> str:
    if (Path(model) / "config.json").is_file():
        return str(Path(model).absolute())
    from flywheel.run.model_prep import resolve_model  # a shipped or Hub name: the installed project

    return resolve_model(model)


def make_prompts(model_dir: str, count: int, length: int, seed: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.chat_template:  # a real model: real requests, so its samples end where it ends them
        return [
            tok.apply_chat_template([{"role": "user", "content": REQUESTS[i % len(REQUESTS)]}],
                                    add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
            for i in range(count)
        ]  # fmt: skip
    rng = random.Random(seed)
    return [
        [rng.randrange(256) for _ in range(length + rng.randint(-length // 5, length // 5))]
        for _ in range(count)
    ]


def make_engine(backend: str, model_dir: str, max_model_len: int):
    if backend == "vllm":
        from flywheel.config import EngineConfig
        from flywheel.policy.engines.vllm_engine import VLLMEngine

        return VLLMEngine(
            model_dir, EngineConfig(dtype="bfloat16", max_model_len=max_model_len, gpu_memory_utilization=0.3)
        )
    from flywheel.policy.engines.hf_engine import HFEngine

    return HFEngine(model_dir, SimpleNamespace(dtype="bfloat16"))


def source_defaults(cls_name: str = "TrainerConfig") -> dict:
    """A config section's defaults read from its source (flywheel/config/training.py), for a
    machine without pydantic: every field whose default is a literal, bare or Field's first
    argument."""
    tree = ast.parse((ROOT / "flywheel" / "config" / "training.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    defaults = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "Field" and value.args:
                value = value.args[0]
            try:
                defaults[node.target.id] = ast.literal_eval(value)
            except ValueError:
                pass
    return defaults


def trainer_config(micro_batch_tokens: int):
    """The trainer config's defaults with the check's settings; TrainerConfig where pydantic
    is installed, else the same values read from its source."""
    settings = dict(learning_rate=1e-6, micro_batch_tokens=micro_batch_tokens, bf16=True, lora=None)
    try:
        from flywheel.config.training import TrainerConfig
    except ImportError:  # no pydantic here
        return SimpleNamespace(**{**source_defaults(), **settings})
    return TrainerConfig(**settings)


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run(args, work: Path) -> dict:
    import torch
    import transformers

    from flywheel.policy.engines import SamplingSpec
    from flywheel.policy.plain_trainer import PlainTrainer
    from flywheel.policy.trainer import TrainSample

    cuda = torch.cuda.is_available() and not args.dry_run
    device_name = (
        torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})"
    )
    report: dict = {"device": device_name, "dry_run": args.dry_run, "torch": torch.__version__,
                    "transformers": transformers.__version__}  # fmt: skip
    t0 = time.perf_counter()
    if args.model:
        model_dir, report["model"] = resolve(args.model), args.model
    else:
        shapes = TINY_SHAPES if args.dry_run else QWEN_05_SHAPES
        model_dir = random_model(work / "model", shapes)
        report["model"] = (
            "tiny random Qwen2" if args.dry_run else "random weights, Qwen2.5-Coder-0.5B's shapes"
        )
    report["model_s"] = time.perf_counter() - t0
    prompts = make_prompts(model_dir, args.prompts, args.prompt_tokens, args.seed)

    backend, why = pick_engine(args.engine, args.dry_run)
    t0 = time.perf_counter()
    engine = make_engine(backend, model_dir, max(map(len, prompts)) + args.max_tokens + 8)
    report["engine"], report["engine_why"], report["engine_load_s"] = (
        engine.name,
        why,
        time.perf_counter() - t0,
    )
    engine.generate(prompts[:1], SamplingSpec(n=1, max_tokens=4, seed=args.seed))  # warm-up
    synchronize()
    t0 = time.perf_counter()
    groups = engine.generate(
        prompts, SamplingSpec(n=args.n, max_tokens=args.max_tokens, temperature=1.0, seed=args.seed)
    )
    synchronize()
    rollout_s = time.perf_counter() - t0
    generated = sum(len(s.token_ids) for g in groups for s in g)
    report["rollout"] = {"prompts": len(prompts), "n": args.n, "max_tokens": args.max_tokens,
                         "tokens": generated, "seconds": rollout_s, "tokens_per_s": generated / rollout_s}  # fmt: skip

    t0 = time.perf_counter()
    trainer = PlainTrainer(
        model_dir, trainer_config(args.micro_batch_tokens), device="cuda" if cuda else "cpu"
    )
    report["trainer_load_s"] = time.perf_counter() - t0
    samples = [
        TrainSample(prompt, s.token_ids, s.logprobs, 1.0 if j % 2 else -1.0, engine_mismatch=True)
        for prompt, g in zip(prompts, groups) for j, s in enumerate(g)
    ]  # fmt: skip
    params = sum(p.numel() for p in trainer.engine.parameters() if p.requires_grad)
    times, metrics = [], {}
    for i in range(args.warmup_steps + args.steps):  # the first step allocates AdamW's state: not timed
        synchronize()
        t0 = time.perf_counter()
        metrics = trainer.step(samples)
        synchronize()
        if i >= args.warmup_steps:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    achieved = 6 * params * metrics["tokens"] / step_s / 1e12
    peak = args.peak_tflops or (peak_tflops(device_name) if cuda else None)
    report["update"] = {"parameters": params, "tokens": metrics["tokens"], "micro_batches": metrics["micro_batches"],
                        "steps_timed": len(times), "step_s": step_s, "tflops": achieved, "peak_tflops": peak,
                        "mfu": achieved / peak if peak else None, "loss": metrics["loss"]}  # fmt: skip
    if cuda:
        report["update"]["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30

    t0 = time.perf_counter()
    exported = trainer.export(work / "policy-1")
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.load_weights(exported)
    synchronize()
    load_s = time.perf_counter() - t0
    seqs = [p + g[0].token_ids for p, g in zip(prompts[:2], groups[:2])]
    lens = [len(p) for p in prompts[:2]]
    after = engine.prompt_logprobs(seqs, lens)
    want = trainer.logprobs(seqs, lens)
    gap = max(abs(a - b) for row_a, row_b in zip(after, want) for a, b in zip(row_a, row_b))
    report["weight_sync"] = {"export_s": export_s, "load_s": load_s, "total_s": export_s + load_s,
                             "max_abs_logprob_gap": gap}  # fmt: skip
    engine.close()
    return report


def show(r: dict) -> None:
    ro, up, ws = r["rollout"], r["update"], r["weight_sync"]
    print(f"device: {r['device']} (torch {r['torch']}, transformers {r['transformers']})")
    print(
        f"model: {r['model']} ({up['parameters'] / 1e6:.{0 if up['parameters'] > 1e8 else 2}f}M parameters), ready in {r['model_s']:.1f} s"
    )
    print(f"engine: {r['engine']} ({r['engine_why']}), loaded in {r['engine_load_s']:.1f} s")
    print(f"rollout: {ro['prompts']} prompts x {ro['n']} samples x <= {ro['max_tokens']} tokens: "
          f"{ro['tokens']} tokens in {ro['seconds']:.1f} s = {ro['tokens_per_s']:.0f} tok/s")  # fmt: skip
    mfu = (
        f"MFU {100 * up['mfu']:.1f}% of {up['peak_tflops']:.0f}"
        if up["mfu"] is not None
        else "MFU n/a (no peak known)"
    )
    print(f"update (plain torch, bf16 autocast): {up['tokens']} tokens in {up['micro_batches']} micro-batches, "
          f"{up['step_s']:.2f} s/step (median of {up['steps_timed']}), {up['tflops']:.2f} TFLOP/s, {mfu}")  # fmt: skip
    if "peak_memory_gib" in up:
        print(f"peak GPU memory: {up['peak_memory_gib']:.1f} GiB")
    print(f"weight sync: export {ws['export_s']:.2f} s + engine load {ws['load_s']:.2f} s = {ws['total_s']:.2f} s; "
          f"engine vs trainer after it: max |logprob gap| {ws['max_abs_logprob_gap']:.3g}")  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny random model, 1 step, a few tokens")
    ap.add_argument("--model", help="a local HF model dir (or a shipped name where the project is installed)")
    ap.add_argument("--engine", choices=("auto", "vllm", "hf"), default="auto")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=150, help="random prompts' mean length")
    ap.add_argument("--steps", type=int, default=3, help="timed update steps")
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak (default: from its name)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the report here as JSON")
    args = ap.parse_args(argv)
    if args.dry_run:
        args.prompts, args.n, args.max_tokens, args.prompt_tokens = 4, 2, 8, 12
        args.steps, args.warmup_steps, args.micro_batch_tokens = 1, 0, 512
    use_checkout()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:  # the model and the export
        report = run(args, Path(work))
    show(report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
