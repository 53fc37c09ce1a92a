"""The update step with and without sharing a group's prompt, side by side, one script.

    .venv/bin/python bench/share_prompt.py [MODEL] [--groups 4] [--k 8] [--prompt 300]
        [--completion 20,200] [--steps 3] [--engine zero3|torch] [--out FILE.json]

A GRPO update trains on groups of k samples that share one prompt. Without sharing
every sample runs its prompt again; with `trainer.share_prompt` (policy/batching.py)
the prompt runs once and the k completions run on its key/value cache. The batch is
synthetic token ids shaped like the 2-core split run's cycles (bench/README.md: 65-79%
of an update's tokens were prompt tokens, with ~300-token prompts and completions of
20-200 tokens); the cost of a step does not depend on what the tokens say.

`--engine zero3` times the flywheel's trainer (policy/trainer.py, DeepSpeed ZeRO-3,
AdamW step included), toggling `cfg.share_prompt` between steps on one trainer.
`--engine torch` times the same loss's forward and backward on the bare HF model
(no optimizer step), for a machine without DeepSpeed. The arms alternate (the machine is
noisy); each arm's first step is a warm-up and is not counted. MODEL is an HF dir, or
(`--engine torch`) a config.json to build random weights from (the step's cost is the
architecture's).
Prints and writes each arm's median seconds per step, tokens run, the ratio, and each
arm's loss (they must agree up to rounding: sharing changes the cost, not the objective).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_groups(vocab: int, groups: int, k: int, prompt: int, lo: int, hi: int):
    from flywheel.policy.trainer import TrainSample

    rng = random.Random(0)
    batch = []
    for _ in range(groups):
        p = [rng.randrange(vocab) for _ in range(prompt + rng.randint(-prompt // 5, prompt // 5))]
        for i in range(k):
            c = [rng.randrange(vocab) for _ in range(rng.randint(lo, hi))]
            batch.append(TrainSample(p, c, [-2.0] * len(c), 1.0 if i % 2 else -1.0))
    return batch


def load_model(model: str, device: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(model)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if path.name == "config.json":  # random weights, made where they will run
        with torch.device(device):
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path.parent), dtype=dtype)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)


class BareStep:
    """The loss's forward and backward on the bare model, one micro-batch per group
    (shared) or per group's samples run whole (not shared)."""

    def __init__(self, model: str, device: str):
        self.model, self.device = load_model(model, device), device
        self.model.config.use_cache = False

    def step(self, batch, share: bool) -> tuple[int, float]:
        from flywheel.policy.batching import prompt_groups
        from flywheel.policy.logprobs import pad_batch, shared_prompt_logprobs, token_logprobs

        self.model.zero_grad(set_to_none=True)
        tokens, total = 0, 0.0
        for group in prompt_groups(batch):
            comps = [s.completion_ids for s in group]
            if share:
                lp = shared_prompt_logprobs(self.model, group[0].prompt_ids, comps, self.device)
                tokens += len(group[0].prompt_ids) + sum(map(len, comps))
            else:
                ids, mask = pad_batch([s.prompt_ids + s.completion_ids for s in group])
                lp = token_logprobs(
                    self.model, ids.to(self.device), mask.to(self.device), len(group[0].prompt_ids) - 1
                )
                lp = lp * mask[:, 1:].to(lp.device)  # padding out
                tokens += int(mask.sum())
            loss = -lp.float().sum()
            loss.backward()
            total += loss.item()
        return tokens, total  # .item() waits for the device


class TrainerStep:
    def __init__(self, model: str, micro_batch_tokens: int):
        from flywheel.config.training import TrainerConfig
        from flywheel.policy.trainer import GRPOTrainer

        self.trainer = GRPOTrainer(
            model, TrainerConfig(learning_rate=0.0, micro_batch_tokens=micro_batch_tokens)
        )

    def step(self, batch, share: bool) -> tuple[int, float]:
        self.trainer.cfg.share_prompt = share
        metrics = self.trainer.step(batch)
        return metrics["tokens"], metrics["loss"]


def main() -> None:
    import flywheel

    flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--completion", default="20,200", help="lo,hi tokens, uniform")
    ap.add_argument("--steps", type=int, default=3, help="timed steps an arm, after one warm-up")
    ap.add_argument("--engine", choices=["zero3", "torch"], default="zero3")
    ap.add_argument("--micro-batch-tokens", type=int, default=2048)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.model is None:
        from flywheel.run.model_prep import resolve_model

        args.model = resolve_model(None)  # the embedded SmolLM2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.engine == "zero3":
        runner = TrainerStep(args.model, args.micro_batch_tokens)
        vocab = runner.trainer.engine.module.config.vocab_size
    else:
        runner = BareStep(args.model, device)
        vocab = runner.model.config.vocab_size
    lo, hi = map(int, args.completion.split(","))
    batch = make_groups(vocab, args.groups, args.k, args.prompt, lo, hi)
    times: dict[bool, list[float]] = {False: [], True: []}
    tokens: dict[bool, int] = {}
    losses: dict[bool, float] = {}  # the arms' losses must agree: the same objective
    for i in range(args.steps + 1):
        for share in (False, True) if i % 2 == 0 else (True, False):
            t0 = time.perf_counter()
            tokens[share], losses[share] = runner.step(batch, share)
            if i > 0:
                times[share].append(time.perf_counter() - t0)
            print(
                f"step {i} share={share}: {time.perf_counter() - t0:.2f} s, {tokens[share]} tokens",
                flush=True,
            )
    plain, shared = statistics.median(times[False]), statistics.median(times[True])
    result = {
        "engine": args.engine,
        "device": torch.cuda.get_device_name()
        if device == "cuda"
        else f"cpu, {torch.get_num_threads()} threads",
        "batch": {"groups": args.groups, "k": args.k, "prompt": args.prompt, "completion": [lo, hi]},
        "seconds_per_step": {"not_shared": times[False], "shared": times[True]},
        "median_s": {"not_shared": round(plain, 3), "shared": round(shared, 3)},
        "tokens": {"not_shared": tokens[False], "shared": tokens[True]},
        "loss": {"not_shared": losses[False], "shared": losses[True]},
        "loss_relative_difference": abs(losses[True] - losses[False]) / max(1e-12, abs(losses[False])),
        "token_ratio": round(tokens[False] / tokens[True], 2),
        "speedup": round(plain / shared, 2),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
