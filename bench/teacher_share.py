"""The distillation teacher's scoring with and without sharing a group's prompt, side by side.

    .venv/bin/python bench/teacher_share.py TEACHER --store LAKE --run RUN_ID [--cycle 0]
        [--rounds 2] [--batch-tokens 1024] [--dtype bfloat16] [--out FILE.json]

In the update stage the teacher (policy/teacher.py) scores every sampled token of a cycle.
A GRPO group's k samples share one prompt; without sharing every sample runs it again,
with it the prompt runs once and the k completions run on its key/value cache. This
scores one real cycle's training samples (their token ids from the lake's trajectories:
the prompts and completions the student really produced) both ways, alternating arms
`--rounds` times on one loaded teacher, and prints each arm's best seconds, the tokens
it ran, the ratio, and the largest difference between the two arms' logprobs (sharing
changes the cost, not the scores, up to bf16 rounding).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def cycle_samples(store: str, run_id: str, cycle: int) -> tuple[list, list]:
    from flywheel.storage.lake import Lake
    from flywheel.storage.query import connect

    rows = (
        connect(Lake(store), run_id)
        .execute(
            "SELECT prompt_token_ids, completion_token_ids FROM trajectories "
            "WHERE run_id = ? AND cycle = ? AND split = 'train' ORDER BY group_id, sample_index",
            [run_id, cycle],
        )
        .fetchall()
    )
    if not rows:
        raise SystemExit(f"no training trajectories for run {run_id} cycle {cycle} in {store}")
    return [list(p) for p, _ in rows], [list(c) for _, c in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("teacher")
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--cycle", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=1024)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--out")
    args = ap.parse_args()

    from flywheel.config import DistillConfig
    from flywheel.policy.teacher import Teacher

    prompts, completions = cycle_samples(args.store, args.run, args.cycle)
    cfg = DistillConfig(mode="only", teacher=args.teacher, dtype=args.dtype, batch_tokens=args.batch_tokens)
    teacher = Teacher(args.teacher, cfg, min_shared_prompt=None)
    arms = {"unshared": None, "shared": 0}
    best: dict[str, float] = {}
    ran, scores = {}, {}
    for r in range(args.rounds):
        for name in arms if r % 2 == 0 else reversed(list(arms)):  # alternate the order
            teacher.min_shared_prompt = arms[name]
            samples = [SimpleNamespace(prompt_ids=p, completion_ids=c) for p, c in zip(prompts, completions)]
            t0 = time.perf_counter()
            ran[name] = teacher.annotate(samples)["teacher_tokens"]
            took = time.perf_counter() - t0
            scores[name] = [s.teacher_logprobs for s in samples]
            best[name] = min(best.get(name, took), took)
            print(f"round {r} {name}: {took:.1f} s, {ran[name]:,} tokens", flush=True)
    diff = max(abs(a - b) for u, v in zip(scores["shared"], scores["unshared"]) for a, b in zip(u, v))
    out = {
        "run": args.run,
        "cycle": args.cycle,
        "samples": len(prompts),
        "prompts": len({tuple(p) for p in prompts}),
        "completion_tokens": sum(map(len, completions)),
        "dtype": args.dtype,
        "batch_tokens": args.batch_tokens,
        "rounds": args.rounds,
        **{f"{k}_s": round(v, 2) for k, v in best.items()},
        **{f"{k}_tokens": v for k, v in ran.items()},
        "speedup": round(best["unshared"] / best["shared"], 3),
        "max_abs_logprob_diff": diff,
    }
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
