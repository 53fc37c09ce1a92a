"""Where one trainer step's time goes, float32 against bf16 (issue 44, item 2), one script.

    .venv/bin/python bench/step_breakdown.py [MODEL_DIR] [--samples 16] [--dtypes float32 bfloat16] [--profile]

The trainer (policy/trainer.py, DeepSpeed ZeRO-3, one process on CPU) on bench/roofline.py's
synthetic batch (bench/update.py's `make_batch`), once per dtype: one warm-up RL (GRPO) step
(the first allocates gradients and AdamW's moments), then one timed step. Timers wrap the
trainer's own phases and DeepSpeed's ZeRO-3 hooks from outside (class attributes patched in
this process only; the trainer's code is unchanged), each also a `torch.profiler`
record_function range:

- logprobs: the trainer's `_logprobs` (forward to logits, then the float32 log-softmax and
  gather over the vocabulary); forward: DeepSpeed's `engine.forward` inside it; the
  log-softmax/gather is the difference.
- backward: `engine.backward`; step: `engine.step` (gradient clipping, AdamW, ZeRO-3's
  partition bookkeeping), with AdamW's `_optimizer_step` and the clip shown apart.
- ZeRO-3 gathers (`fetch_sub_module`, split forward/backward) and releases, and its gradient
  reduce-and-partition: these run inside forward and backward, so they are "of which" rows.

Then the plain-torch reference: the same model without DeepSpeed, the same micro-batches and
logprob code, a forward+backward under `torch.autocast` (and float32), then a torch AdamW step.
`--profile` adds one profiled step per dtype and prints torch.profiler's top ops by self CPU
time (the profiler's own overhead inflates that step; the table comes from the unprofiled one).
Not measured here: the vLLM engine's sleep/wake (it is no part of the trainer step).
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.update, run as a script

TIMES: dict[str, float] = defaultdict(float)
_ACTIVE: set[str] = set()


def _timed(label: str, fn):
    """fn, timed into TIMES[label] and a profiler range; re-entry is counted once."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if label in _ACTIVE:
            return fn(*args, **kwargs)
        _ACTIVE.add(label)
        t0 = time.perf_counter()
        try:
            with torch.profiler.record_function(label):
                return fn(*args, **kwargs)
        finally:
            TIMES[label] += time.perf_counter() - t0
            _ACTIVE.discard(label)

    return wrapper


def instrument() -> None:
    """Patch the phases' classes (this process only)."""
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero import partitioned_param_coordinator as ppc
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Z3

    from flywheel.policy.trainer import GRPOTrainer

    GRPOTrainer._logprobs = _timed("logprobs", GRPOTrainer._logprobs)
    DeepSpeedEngine.forward = _timed("forward", DeepSpeedEngine.forward)
    DeepSpeedEngine.backward = _timed("backward", DeepSpeedEngine.backward)
    DeepSpeedEngine.step = _timed("step", DeepSpeedEngine.step)
    Z3._optimizer_step = _timed("adamw", Z3._optimizer_step)
    Z3.unscale_and_clip_grads = _timed("clip", Z3.unscale_and_clip_grads)
    reduce = "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads"
    setattr(Z3, reduce, _timed("grad_reduce", getattr(Z3, reduce)))
    coord = ppc.PartitionedParameterCoordinator
    fetch = coord.fetch_sub_module

    def fetch_split(self, submodule, forward):
        return (_fetch_fwd if forward else _fetch_bwd)(self, submodule, forward)

    _fetch_fwd, _fetch_bwd = _timed("fetch_fwd", fetch), _timed("fetch_bwd", fetch)
    coord.fetch_sub_module = fetch_split
    coord.release_sub_module = _timed("release", coord.release_sub_module)


ROWS = (  # (label, what, of which)
    ("total", "trainer.step, whole", False),
    ("forward", "forward to logits (engine.forward)", False),
    ("fetch_fwd", "ZeRO-3 parameter gathers in forward", True),
    ("logsoftmax", "float32 log-softmax + gather over the vocabulary", False),
    ("backward", "backward (engine.backward)", False),
    ("fetch_bwd", "ZeRO-3 parameter gathers in backward", True),
    ("grad_reduce", "ZeRO-3 gradient reduce + partition", True),
    ("release", "ZeRO-3 parameter releases (fwd + bwd)", True),
    ("step", "engine.step (clip, AdamW, ZeRO-3 partitions)", False),
    ("adamw", "AdamW update", True),
    ("clip", "gradient unscale + clip", True),
    ("rest", "loss, batching, bookkeeping (the remainder)", False),
)


def trainer_breakdown(model: str, bf16: bool, args) -> tuple[dict, list]:
    from bench.update import make_batch
    from flywheel.config import TrainerConfig
    from flywheel.policy.trainer import GRPOTrainer

    trainer = GRPOTrainer(model, TrainerConfig(learning_rate=1e-6, bf16=bf16))
    batch = make_batch(trainer.engine.module.config.vocab_size, args.samples, args.prompt, args.completion)
    t0 = time.perf_counter()
    trainer.step(batch)  # warm-up: the first step allocates gradients and AdamW's moments
    warm = time.perf_counter() - t0
    TIMES.clear()
    t0 = time.perf_counter()
    trainer.step(batch)
    t = dict(TIMES, total=time.perf_counter() - t0, warmup=warm)
    t["logsoftmax"] = t["logprobs"] - t["forward"]
    t["rest"] = t["total"] - t["logprobs"] - t["backward"] - t["step"]
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            trainer.step(batch)
        print(f"--- torch.profiler, {'bf16' if bf16 else 'float32'} step (top ops by self CPU time)")
        print(
            prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=50)
        )
    del trainer
    gc.collect()
    return t, batch


def plain_reference(model: str, batch: list, args) -> dict:
    """The same micro-batches and logprob code on the unwrapped model: fwd, bwd, AdamW."""
    from transformers import AutoModelForCausalLM

    from flywheel.config import TrainerConfig
    from flywheel.policy.batching import plan, rank_share
    from flywheel.policy.trainer import GRPOTrainer, place_completions

    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    net.config.use_cache = False
    opt = torch.optim.AdamW(net.parameters(), lr=1e-6)
    cfg = TrainerConfig(learning_rate=1e-6)
    helper = GRPOTrainer.__new__(GRPOTrainer)  # only for _logprobs' layout (no DeepSpeed)
    helper.device, helper.cfg = "cpu", cfg
    share = helper.min_shared_prompt()  # the trainer's own choice (on CPU: every prompt)
    micro = plan(rank_share(batch, 0, 1, share is not None), cfg.micro_batch_tokens, share)
    out = {}
    for name, bf16 in (("bfloat16", True), ("float32", False)):
        for rep in range(2):  # the first allocates the gradients; the second is timed
            fwd = bwd = 0.0
            for mb in micro:
                t0 = time.perf_counter()
                with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
                    lp = GRPOTrainer._logprobs.__wrapped__(helper, net, mb)
                weights = torch.zeros_like(lp)
                place_completions(mb.samples, torch.zeros_like(lp), weights, [1e-3] * len(mb.samples),
                                  mb.shared_prompt)  # fmt: skip
                loss = -(lp * weights).sum()
                t1 = time.perf_counter()
                loss.backward()
                fwd, bwd = fwd + t1 - t0, bwd + time.perf_counter() - t1
            t0 = time.perf_counter()
            opt.step()
            opt.zero_grad()
            out[name] = {"logprobs": fwd, "backward": bwd, "adamw": time.perf_counter() - t0}
    return out


def main() -> None:
    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from bench.update import batch_arguments
    from flywheel.run.model_prep import resolve_model

    ap: argparse.ArgumentParser = batch_arguments(steps=1)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--profile", action="store_true", help="one more, profiled, step per dtype")
    args = ap.parse_args()
    model = resolve_model(args.model)
    instrument()
    t_start = time.perf_counter()
    res = {}
    for name in args.dtypes:
        res[name], batch = trainer_breakdown(model, name == "bfloat16", args)
    ref = plain_reference(model, batch, args)
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
    print(f"threads {torch.get_num_threads()}; batch: {len(batch)} sequences, {tokens} tokens; "
          f"warm-up steps: " + ", ".join(f"{n} {r['warmup']:.2f} s" for n, r in res.items()))  # fmt: skip
    head = " | ".join(f"{n} s | share" for n in args.dtypes)
    ratio = {"float32", "bfloat16"} <= set(args.dtypes)
    print(f"| phase (one RL step, ZeRO-3) | {head} |" + (" float32 / bf16 |" if ratio else ""))
    print("|---|" + "---|---|" * len(args.dtypes) + ("---|" if ratio else ""))
    for label, what, sub in ROWS:
        cells = " | ".join(f"{res[n].get(label, 0.0):.2f} | {res[n].get(label, 0.0) / res[n]['total']:.0%}"
                           for n in args.dtypes)  # fmt: skip
        r = res["float32"].get(label, 0.0) / max(res["bfloat16"].get(label, 0.0), 1e-9) if ratio else None
        print(f"| {'  of which: ' if sub else ''}{what} | {cells} |" + (f" {r:.2f}x |" if ratio else ""))
    print("| plain torch, no DeepSpeed (same micro-batches) | bf16 autocast s | float32 s | float32 / bf16 |")
    print("|---|---|---|---|")
    for key, what in (("logprobs", "forward + log-softmax/gather"), ("backward", "backward"),
                      ("adamw", "torch AdamW step")):  # fmt: skip
        b, f = ref["bfloat16"][key], ref["float32"][key]
        print(f"| {what} | {b:.2f} | {f:.2f} | {f / b:.2f}x |")
    print(f"wall: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
