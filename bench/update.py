"""Update-step time: DeepSpeed ZeRO-3 (the flywheel's trainer) against plain torch on the
same model and the same batch, one script, alternating (the machine is noisy).

    .venv/bin/python bench/update.py [MODEL_DIR] [--samples 16] [--budgets 1024,4096]
    .venv/bin/python bench/update.py [MODEL_DIR] --lora 16     # LoRA against full fine-tuning

Both run the same GRPO loss with AdamW; the batch is synthetic token ids (the cost of a
step does not depend on what the tokens say) with prompt and completion lengths spread
like a default cycle's. Prints seconds per step and the ratio, then the ZeRO-3 step at
other micro-batch token budgets with their padding fractions.

`--lora R` instead runs the ZeRO-3 trainer twice, full fine-tuning and LoRA of rank R on
the default target modules, each in a process of its own (peak memory is per process),
stepping in turn on the same batch; prints each one's step time, trainable parameters and
peak resident memory after loading and after the steps (gradients and Adam's moments are
allocated at the first step).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import resource
import statistics
import time

import torch


def make_batch(vocab: int, samples: int, prompt: int, completion: int):
    from flywheel.policy.trainer import TrainSample

    rng = random.Random(0)
    batch = []
    for i in range(samples):
        p = [rng.randrange(vocab) for _ in range(prompt + rng.randint(-40, 40))]
        c = [rng.randrange(vocab) for _ in range(rng.randint(20, 2 * completion))]
        batch.append(TrainSample(p, c, [-2.0] * len(c), 1.0 if i % 2 else -1.0))
    return batch


def batch_arguments(steps: int) -> argparse.ArgumentParser:
    """The model and the synthetic batch's shape, shared with bench/roofline.py."""
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=150)
    ap.add_argument("--completion", type=int, default=100)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--micro-batch-tokens", type=int, default=None,
                    help="trainer.micro_batch_tokens (default: the config's); a 152k vocabulary's logits need less")
    return ap


class PlainTorchStep:
    """The same loss and micro-batching on an unwrapped model with torch's AdamW."""

    def __init__(self, model_dir: str, cfg):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.learning_rate)
        self.cfg = cfg

    def step(self, samples):
        from flywheel.policy.batching import micro_batches
        from flywheel.policy.grpo import clipped_pg_loss, token_weights
        from flywheel.policy.logprobs import pad_batch, token_logprobs

        weights_of = dict(
            zip(map(id, samples), token_weights([len(s.completion_ids) for s in samples], "token_mean"))
        )
        self.opt.zero_grad()
        for chunk in micro_batches(samples, self.cfg.micro_batch_tokens):
            if not chunk:
                continue
            ids, mask = pad_batch([s.prompt_ids + s.completion_ids for s in chunk])
            new_lp = token_logprobs(self.model, ids, mask, min(len(s.prompt_ids) for s in chunk) - 1)
            old_lp, weights = torch.zeros_like(new_lp), torch.zeros_like(new_lp)
            for i, s in enumerate(chunk):
                a, b = len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.completion_ids)
                old_lp[i, a:b] = torch.tensor(s.old_logprobs)
                weights[i, a:b] = weights_of[id(s)]
            adv = torch.tensor([s.advantage for s in chunk])
            loss, _ = clipped_pg_loss(new_lp, old_lp, adv, weights)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.opt.step()


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def _trainer_process(conn, model: str, lora_rank: int) -> None:
    """One trainer in a child process: builds it, reports, then steps on request."""
    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from flywheel.config.training import LoraConfig, TrainerConfig
    from flywheel.policy.trainer import GRPOTrainer

    lora = LoraConfig(r=lora_rank, alpha=2 * lora_rank) if lora_rank else None
    trainer = GRPOTrainer(model, TrainerConfig(learning_rate=1e-6, lora=lora))
    trainable = sum(
        getattr(p, "ds_numel", p.numel()) for p in trainer.engine.module.parameters() if p.requires_grad
    )
    conn.send((trainable, _peak_rss_gib()))
    batch = conn.recv()
    while conn.recv() == "step":
        t0 = time.perf_counter()
        trainer.step(batch)
        conn.send(time.perf_counter() - t0)
    conn.send(_peak_rss_gib())


def compare_lora(model: str, batch, rank: int, steps: int) -> None:
    ctx = mp.get_context("spawn")
    sides = {"full fine-tuning": 0, f"LoRA r={rank}": rank}
    pipes, procs, built = {}, [], {}
    for name, r in sides.items():  # built one after the other: loading is memory-heavy too
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_trainer_process, args=(child, model, r), daemon=True)
        proc.start()
        pipes[name] = parent
        procs.append(proc)
        built[name] = parent.recv()
        parent.send(batch)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(steps + 1):  # the first step of each allocates its optimizer state: not timed
        for name, conn in pipes.items():
            conn.send("step")
            times[name].append(conn.recv())
    for name, conn in pipes.items():
        conn.send("stop")
        trainable, rss_loaded = built[name]
        rss_end = conn.recv()
        ts = times[name][1:]
        print(f"{name:18s} {statistics.median(ts):7.2f} s/step (median of {len(ts)}), "
              f"{trainable / 1e6:8.2f} M trainable, peak RSS {rss_loaded:5.2f} GiB loaded, "
              f"{rss_end:5.2f} GiB after steps")  # fmt: skip
    for proc in procs:
        proc.join(timeout=30)
    full, adapted = (statistics.median(times[n][1:]) for n in sides)
    print(f"ratio LoRA / full step time: {adapted / full:.2f}x")


def main() -> None:
    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them
    from flywheel.config import TrainerConfig
    from flywheel.run.model_prep import resolve_model
    from flywheel.policy.trainer import GRPOTrainer

    ap = batch_arguments(steps=3)
    ap.add_argument("--budgets", default="", help="comma-separated micro_batch_tokens to time as well")
    ap.add_argument("--lora", type=int, default=0, help="compare LoRA of this rank against full fine-tuning")
    args = ap.parse_args()
    model = resolve_model(args.model)
    if args.lora:
        from transformers import AutoConfig

        vocab = AutoConfig.from_pretrained(model).vocab_size
        batch = make_batch(vocab, args.samples, args.prompt, args.completion)
        print(
            f"batch: {len(batch)} sequences, {sum(len(s.prompt_ids) + len(s.completion_ids) for s in batch)} tokens"
        )
        return compare_lora(model, batch, args.lora, args.steps)
    budget = {"micro_batch_tokens": args.micro_batch_tokens} if args.micro_batch_tokens else {}
    cfg = TrainerConfig(learning_rate=1e-6, **budget)
    plain, zero3 = PlainTorchStep(model, cfg), GRPOTrainer(model, cfg)
    batch = make_batch(plain.model.config.vocab_size, args.samples, args.prompt, args.completion)
    times: dict[str, list[float]] = {"plain torch": [], "deepspeed zero-3": []}
    for _ in range(args.steps):
        for name, runner in (("plain torch", plain), ("deepspeed zero-3", zero3)):
            t0 = time.perf_counter()
            metrics = runner.step(batch)
            times[name].append(time.perf_counter() - t0)
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
    print(
        f"batch: {len(batch)} sequences, {tokens} tokens, padding fraction {metrics['padding_fraction']:.3f}"
    )
    for name, ts in times.items():
        print(f"{name:18s} {statistics.median(ts):7.2f} s/step (median of {len(ts)})")
    ratio = statistics.median(times["deepspeed zero-3"]) / statistics.median(times["plain torch"])
    print(f"ratio zero-3 / plain torch: {ratio:.2f}x (micro_batch_tokens {cfg.micro_batch_tokens})")
    for budget in [int(b) for b in args.budgets.split(",") if b]:
        zero3.cfg = cfg.model_copy(update={"micro_batch_tokens": budget})
        ts = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            metrics = zero3.step(batch)
            ts.append(time.perf_counter() - t0)
        print(
            f"zero-3 at micro_batch_tokens {budget:6d}: {statistics.median(ts):7.2f} s/step, "
            f"{metrics['micro_batches']} micro-batches, padding {metrics['padding_fraction']:.3f}"
        )


if __name__ == "__main__":
    main()
