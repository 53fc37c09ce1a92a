"""Time to reward: TRL's GRPOTrainer against the flywheel on the same model, tasks, reward
and machine, for the same wall budget, one script.

    .venv/bin/python bench/vs_trl.py [--minutes 30] [--domains extraction,code] [--levels 1]
        [--eval-per-level 16] [--eval-points 6] [--order trl-first] [--rounds 1]
        [--recipe recipes/cpu-30min.yaml] [--set trainer.learning_rate=1e-5 ...]

Each side trains for `--minutes` of wall time in its own fresh process (the order is a
flag, and `--rounds 2` alternates it, since the machine is noisy). Afterwards one shared
evaluator scores the policies both sides had at comparable wall-clock points on the same
held-out tasks, and the script prints held-out reward against wall time side by side,
the time each side needed to reach TRL's final reward and their ratio (target: the
flywheel in at most a third of TRL's time), and writes `points.json`, `curves.png` and
`table.md` to `--out`.

Identical on both sides, by construction (both are derived from one FlywheelConfig: the
recipe plus the flags):
- the model (SmolLM2-135M-Instruct fp32 by default), the machine and its threads;
- the train tasks: TRL gets the flywheel sampler's stream of fresh tasks (tasks/sample.py
  `fresh_tasks`, same seeds, in cycle order, `tasks_per_cycle` prompts per step);
- the reward: TRL's reward function calls `flywheel.tasks.score.verify`, the score stage's own
  code, so code is verified in the same bubblewrap sandbox pool; plus the same overlong
  penalty;
- GRPO's knobs where TRL has them: group size k, prompts per step (one optimizer step per
  generation batch, on-policy), learning rate (constant), AdamW, weight decay, gradient
  clipping, clip-low and clip-high epsilons, KL coefficient, token-mean loss ("dapo" in
  TRL), group-normalised advantages, temperature, top-p, max completion tokens, fp32;
- the evaluation: greedy, the held-out tasks of `flywheel eval` (flows/evaluate.py's
  fixed seed), one vLLM engine loading each saved policy in turn, rewards from `verify`.

Not identical, on purpose (they are what is being compared): generation (TRL: transformers
`generate` in the training process, as TRL runs on CPU here; flywheel: vLLM, synced after
each step), the trainer (TRL: plain torch; flywheel: DeepSpeed ZeRO-3), orchestration
(Prefect, the lake, a DeepSpeed checkpoint per cycle), and the flywheel's data choices:
it drops groups whose rewards are all equal, replays failed tasks, and its curriculum
shifts fresh tasks between domains and levels by how much each still teaches, so its
tasks come from the same seeded generator but not always the same ones in the same order;
`--same-task-order` turns replay and the curriculum off for an exact match. Dropping flat groups also shrinks the flywheel's
token-mean denominator (TRL counts their tokens, with advantage 0), so its step is larger
when many groups are flat. Small differences: TRL's group std is the unbiased one (ours
the population std) and its eps 1e-4 (ours 1e-6); TRL exempts biases and norms from
weight decay (the recipe has none).

Wall clock: each side's clock starts in its own process just before it builds anything
(TRL: the trainer, which loads the model; flywheel: the flow, which starts Prefect's
ephemeral server, the sandbox pool, vLLM and DeepSpeed), so start-up costs count. No
evaluation runs during training on either side: TRL saves its weights at the grid times
(the save is excluded from its clock), the flywheel keeps every exported version with the
time it was published, and all evaluation happens afterwards. Both sides look at the
clock after each step or cycle (so each makes at least one) and start no new one once it
has passed the budget: the one in flight finishes and counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import flywheel

flywheel.use_offline_defaults()  # no hub, no telemetry; children inherit them

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the parts below, also when loaded by path
from vs_trl_eval import run_eval
from vs_trl_report import SIDES, plot, summarise, table, time_to  # noqa: F401
from vs_trl_trl import run_trl, trl_args  # noqa: F401


@dataclasses.dataclass
class BenchConfig:
    minutes: float = 30.0  # wall budget per side
    domains: list[str] = dataclasses.field(default_factory=lambda: ["extraction", "code"])
    levels: list[int] = dataclasses.field(default_factory=lambda: [1])
    eval_per_level: int = 16  # held-out tasks per (domain, level)
    eval_points: int = 6  # policies evaluated per side besides the base model
    order: str = "trl-first"  # or "flywheel-first"; later rounds alternate
    rounds: int = 1
    recipe: str = "recipes/cpu-30min.yaml"
    overrides: list[str] = dataclasses.field(default_factory=list)  # `a.b=value`, applied last
    same_task_order: bool = False  # flywheel without replay and curriculum: TRL's exact tasks
    model: str | None = None  # default: the shipped SmolLM2-135M-Instruct
    out: str = ""  # default: runs/vs-trl/<time stamp>
    work_dir: str = ""  # weights and the flywheel's runs; default: a temp dir, removed after
    keep_weights: bool = False
    # TRL's learning rates, each its own TRL run per round; the report takes TRL's best
    # final policy (chosen on the held-out tasks themselves: generous to TRL). Empty: the
    # recipe's, as for the flywheel.
    trl_lrs: list[float] = dataclasses.field(default_factory=list)

    @property
    def budget_s(self) -> float:
        return self.minutes * 60

    def grid(self) -> list[float]:
        """Training wall times (s) at which each side's policy is evaluated."""
        return [self.budget_s * i / self.eval_points for i in range(1, self.eval_points + 1)]

    def trl_arms(self) -> list[float | None]:
        return list(self.trl_lrs) or [None]

    def side_order(self, round_: int) -> tuple[str, str]:
        first = ("trl", "flywheel") if self.order == "trl-first" else ("flywheel", "trl")
        return first if round_ % 2 == 0 else first[::-1]


def flywheel_config(bench: BenchConfig, run_id: str, runs_dir: str):
    """The one config both sides are derived from: the recipe, restricted to the bench's
    domains and levels, keeping every exported policy version, then the user's overrides."""
    from flywheel.config import FlywheelConfig, apply_overrides

    sets = [
        f"run_id={run_id}", f"runs_dir={runs_dir}", "cycles=100000",  # the wall budget stops it
        f"sampler.domains={json.dumps(bench.domains)}", f"sampler.levels={json.dumps(bench.levels)}",
        "store.keep_policy_exports=100000",
    ]  # fmt: skip
    if bench.model:
        sets.append(f"model.path={bench.model}")
    if bench.same_task_order:
        sets += ["replay.enabled=false", "curriculum.enabled=false"]
    return apply_overrides(FlywheelConfig.from_yaml(REPO / bench.recipe), sets + bench.overrides)


def with_trl_lr(bench: BenchConfig, lr: float | None) -> BenchConfig:
    """The bench as one TRL arm of the sweep sees it (the flywheel keeps the recipe's)."""
    if lr is None:
        return bench
    return dataclasses.replace(bench, overrides=[*bench.overrides, f"trainer.learning_rate={lr}"])


def load(spec: str) -> tuple[BenchConfig, Path]:
    data = json.loads(Path(spec).read_text())
    return BenchConfig(**data["bench"]), Path(data["work"])


# ---- the flywheel side -------------------------------------------------------------------------


def run_flywheel(bench: BenchConfig, work: Path, round_: int) -> dict:
    from prefect import flow

    from flywheel.flows.flywheel import _run
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    cfg = flywheel_config(bench, f"vs-trl-r{round_}", str(work / "flywheel-runs"))

    def cycles_until(deadline: float):
        """Checked after each cycle, as TRL's callback checks after each step."""
        cycle = 0
        while cycle == 0 or time.time() < deadline:
            yield cycle
            cycle += 1

    @flow(name="flywheel-vs-trl", flow_run_name=f"flywheel-vs-trl-{cfg.run_id}")
    def flywheel_for(config, deadline: float):
        """The flywheel's own cycle loop (flows/flywheel.py), stopped by wall time."""
        return _run(config, lambda rt: cycles_until(deadline))

    t0 = time.time()
    result = flywheel_for(cfg, t0 + bench.budget_s)
    train_s = time.time() - t0
    lake = Lake(cfg.lake_uri, cfg.store.endpoint, cfg.store.region)
    store = PolicyStore(lake, cfg.run_id, cfg.run_dir / "policy-cache")
    points = []
    for version, entry in sorted(store.manifest["versions"].items(), key=lambda kv: int(kv[0])):
        if store.hf_dir(int(version)):
            published = datetime.fromisoformat(entry["published_at"]).timestamp()
            points.append({"label": f"v{version}", "version": int(version), "cycle": entry["cycle"],
                           "t": published - t0, "dir": store.hf_dir(int(version))})  # fmt: skip
    cycles = [
        {"cycle": c.cycle, "t": datetime.fromisoformat(c.finished_at).timestamp() - t0,
         "train_reward": c.mean_reward, "policy_version": c.policy_version,
         "zero_variance_groups": c.update.get("zero_variance_groups"), "stage_s": c.stage_s}
        for c in result.cycles
    ]  # fmt: skip
    return {"side": "flywheel", "round": round_, "train_s": train_s, "points": on_grid(points, bench.grid()),
            "all_versions": len(points), "steps": cycles}  # fmt: skip


def on_grid(points: list[dict], grid: list[float]) -> list[dict]:
    """The first point at or after each grid time, and the last point: the same rule by
    which TRL's callback saves."""
    chosen = [next((p for p in points if p["t"] >= g), None) for g in grid] + points[-1:]
    seen, out = set(), []
    for p in chosen:
        if p is not None and p["label"] not in seen:
            seen.add(p["label"])
            out.append(p)
    return out


# ---- the driver --------------------------------------------------------------------------------


def phase(name: str, spec: Path, round_: int, log, lr: float | None = None) -> dict:
    """One side (or the evaluation) in a fresh process: the same start for both, and vLLM,
    DeepSpeed and TRL never share a process. A side already finished in a reused
    `--work-dir` is not run again. `lr`: one TRL arm of the learning-rate sweep."""
    tag = f"{name}-lr{lr:g}" if lr else name
    out = spec.parent / f"{tag}-r{round_}.json"
    if name != "eval" and out.exists():
        log(f"== {tag} (round {round_}): reusing {out}")
        return json.loads(out.read_text())
    paths = [str(REPO), os.environ.get("PYTHONPATH")]  # this checkout's packages first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    load_before = os.getloadavg()
    started = time.time()
    log(f"== {tag} (round {round_}) ...")
    argv = [sys.executable, __file__, "--phase", name, "--spec", str(spec), "--round", str(round_)]
    argv += ["--lr", f"{lr:g}"] if lr else []
    subprocess.run([*argv, "--result", str(out)], env=env, cwd=REPO, check=True)
    result = json.loads(out.read_text())
    result.update(process_s=round(time.time() - started, 1), load_before=load_before)
    result["load_after"] = os.getloadavg()
    out.write_text(json.dumps(result, indent=1))
    log(f"== {tag} (round {round_}) done in {result['process_s'] / 60:.1f} min")
    return result


def prepare_work_dir(bench: BenchConfig) -> tuple[Path, Path]:
    """The work dir and its spec. A reused dir must have been made by the same training
    flags (evaluation flags may change), or its finished sides would not compare."""
    work = Path(bench.work_dir or tempfile.mkdtemp(prefix="vs-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    evaluation_only = ("out", "keep_weights", "eval_per_level")
    training = {k: v for k, v in dataclasses.asdict(bench).items() if k not in evaluation_only}
    if spec.exists():
        before = json.loads(spec.read_text())["bench"]
        changed = sorted(k for k in training if before.get(k) != training[k])
        if changed:
            raise SystemExit(f"--work-dir {work} was made with other flags: {', '.join(changed)}")
    spec.write_text(json.dumps({"bench": dataclasses.asdict(bench), "work": str(work)}))
    return work, spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = BenchConfig()
    ap.add_argument("--minutes", type=float, default=d.minutes, help="wall budget per side")
    ap.add_argument("--domains", default=",".join(d.domains))
    ap.add_argument("--levels", default=",".join(map(str, d.levels)))
    ap.add_argument("--eval-per-level", type=int, default=d.eval_per_level)
    ap.add_argument("--eval-points", type=int, default=d.eval_points)
    ap.add_argument("--order", choices=["trl-first", "flywheel-first"], default=d.order)
    ap.add_argument("--rounds", type=int, default=d.rounds, help="later rounds alternate the order")
    ap.add_argument("--recipe", default=d.recipe)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a config override a.b=v")
    ap.add_argument("--same-task-order", action="store_true", help="flywheel without replay and curriculum")
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default="")
    ap.add_argument("--work-dir", default="", help="kept, finished sides reused (default: a temp dir)")
    ap.add_argument("--keep-weights", action="store_true")
    ap.add_argument(
        "--trl-lrs", default="", help="learning rates for TRL, comma-separated: a sweep, best reported"
    )
    ap.add_argument("--phase", choices=[*SIDES, "eval"], help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--lr", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.phase:  # a child process: one side, or the evaluation
        bench, work = load(args.spec)
        if args.phase == "eval":
            points = json.loads((work / "to-evaluate.json").read_text())
            result = {"points": run_eval(bench, flywheel_config(bench, "eval", str(work / "unused")), points)}
        else:
            if args.phase == "trl":
                cfg = flywheel_config(with_trl_lr(bench, args.lr), f"trl-r{args.round}", str(work / "unused"))
                result = run_trl(bench, cfg, work, args.round, f"-lr{args.lr:g}" if args.lr else "")
            else:
                result = run_flywheel(bench, work, args.round)
        Path(args.result).write_text(json.dumps(result, indent=1))
        return

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    bench = BenchConfig(
        minutes=args.minutes, domains=args.domains.split(","), levels=[int(v) for v in args.levels.split(",")],
        eval_per_level=args.eval_per_level, eval_points=args.eval_points, order=args.order, rounds=args.rounds,
        recipe=args.recipe, overrides=args.overrides, same_task_order=args.same_task_order, model=args.model,
        out=args.out or str(REPO / "runs" / "vs-trl" / stamp), work_dir=args.work_dir,
        keep_weights=args.keep_weights, trl_lrs=[float(v) for v in args.trl_lrs.split(",") if v],
    )  # fmt: skip
    out = Path(bench.out)
    out.mkdir(parents=True, exist_ok=True)
    work, spec = prepare_work_dir(bench)

    def log(msg: str) -> None:
        print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)

    log(f"vs_trl: {bench.minutes:g} min per side, {bench.rounds} round(s), work dir {work}, report to {out}")
    runs = []
    try:
        for round_ in range(bench.rounds):
            for side in bench.side_order(round_):
                for lr in bench.trl_arms() if side == "trl" else [None]:
                    runs.append(phase(side, spec, round_, log, lr))
        to_eval = [
            {**p, "side": r["side"], "round": r["round"], "lr": r.get("lr")}
            for r in runs
            for p in r["points"]
        ]
        (work / "to-evaluate.json").write_text(json.dumps(to_eval))
        evaluation = phase("eval", spec, 0, log)
    finally:
        if not bench.keep_weights and not bench.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    evaluated = evaluation["points"]
    summary = summarise(bench, evaluated)
    config = flywheel_config(bench, "vs-trl", "runs").model_dump(mode="json")
    report = {"bench": dataclasses.asdict(bench), "flywheel_config": config, "cpus": os.cpu_count(),
              "runs": runs, "evaluation": evaluation, "summary": summary}  # fmt: skip
    (out / "points.json").write_text(json.dumps(report, indent=1))
    text = table(bench, evaluated, summary)
    (out / "table.md").write_text(text)
    plot(bench, evaluated, summary, out / "curves.png")
    print()
    print(text)
    for r in runs:
        unit = "steps" if r["side"] == "trl" else "cycles"
        first = f"{r['steps'][0]['t']:.0f} s" if r["steps"] else "never"
        arm = f"{r['side']} lr {r['lr']:g}" if r.get("lr") else r["side"]
        print(f"{arm:>14} round {r['round']}: trained {r['train_s'] / 60:.1f} min, {len(r['steps'])} "
              f"{unit} (the first done at {first}, start-up included), load average "
              f"{r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}")  # fmt: skip
    log(f"wrote {out / 'points.json'}, {out / 'table.md'}, {out / 'curves.png'}")


if __name__ == "__main__":
    main()
