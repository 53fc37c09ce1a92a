"""Partial rollouts against cutting episodes at the cycle's end: what carrying saves.

    .venv/bin/python bench/partial_vs_cut.py [MODEL_DIR] --budget 480 [960 ...] [--cycles 6] [--level 1]
        [--max-turns 8] [--tasks 2] [--k 2] [--slots 4] [--max-tokens 32] [--max-model-len 4096]
        [--max-lag 2] [--out bench/results/partial-vs-cut-DATE]

Several consecutive cycles of the generate stage (`flywheel.tasks.generate.play_episodes`:
the episode runner, the flywheel's vLLM engine with continuous turns, the bwrap pool, one
workspace per live episode), each with the same budget of `--budget` sampled tokens
(`generation.partial.stage_tokens`), each sampling `--tasks` new `longhorizon` tasks (the
same ones in both arms) x k episodes, at most `--slots` of them live at once. Two arms, the
cycles of both interleaved so that the machine's load falls on both alike:
  cut      `partial.on_budget: cut`: at the budget an unfinished episode is ended where it
           is ("stage_budget") and scored as it is; an episode not yet begun is ended with no
           turn. Read two ways: *scored as they are* (its tokens train, on a truncated
           episode's reward) and *thrown away* (its tokens are discarded; its group trains
           without it);
  partial  `partial.on_budget: carry`: the groups left unfinished are parked (workspace
           captured, storage/carried.py's rows) and played on first in the next cycle, whose
           policy version is one more; a group older than `--max-lag` versions is restarted
           (`partial.stale: restart`), and what it had sampled is discarded.
Per arm, per cycle and in total: the tokens the model sampled; those in episodes that ran
to their natural end (submit or the turn cap: `completed`), in cut episodes, in episodes
ended otherwise (out of context, an error), discarded (a stale group's), and still parked
after the last cycle (`in flight`: neither used nor lost yet); the episodes of each kind;
the samples and tokens the update would build from the cycle's scored episodes
(`build_batch`, zero-variance groups kept: one sample per turn under the domain's window);
the rewards of the episodes the update would train on (total and count; each ended
episode's reward is in the cycle's row); the generate stage's wall seconds. Then partial/cut
for the useful figures, and the rates compared with n and 95% intervals (`rates`):
completion per drawn episode (the difference paired over tasks, which both arms draw
alike), train samples per cycle (paired over cycles), the mean reward of a trained episode
(bootstrap over episodes). Every sampled token is counted once over its episode's life:
generated = completed + cut + other + discarded + in flight (checked). Raw outputs:
`cycles.jsonl`, `summary.json` and `table.md` under --out/budget-N, one folder per budget
(one engine for all, loaded once).

Not done here: no update runs between cycles (the engine's weights stay; only the policy
version moves, which is what the staleness bound reads), so the update's cost is not in the
seconds (bench/long_horizon.py measures it per trained token), and the rewards say nothing
of learning. The budget is in tokens, not seconds, so the arms get equal work on a loaded
machine; turns already in the engine at the budget finish, so a cycle samples up to
slots x max_tokens past it. Continuous turns on CPU are not reproducible (tasks/multiturn.py),
so the arms sample different text from the same tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import flywheel

flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them

NATURAL = ("submit", "max_turns")  # an episode's own end: it submitted, or its turn cap came
ARMS = {"cut": "cut", "partial": "carry"}  # arm -> generation.partial.on_budget


class Parts:
    """What the generate stage's body reads (tasks/context.py), built here without a run."""

    def __init__(self, engine, tokenizer, domains, sandbox):
        self.engine, self.tokenizer, self.domains, self.sandbox = engine, tokenizer, domains, sandbox
        self.reward_functions, self.judge = [], None


@dataclass
class Arm:
    name: str
    config: object  # FlywheelConfig with this arm's generation.partial
    carried: list[dict] = field(default_factory=list)  # what the last cycle parked (the lake's rows)
    ledger: dict = field(default_factory=dict)  # episode -> tokens it sampled so far, until used or lost
    cycles: list[dict] = field(default_factory=list)
    drawn: list[tuple] = field(default_factory=list)  # (task, sample index) of every episode drawn
    ends: dict = field(default_factory=dict)  # (task, sample index) -> (kind, reward) once it ended


def episode_key(r, cycle: int) -> tuple:
    """An episode over its life: the cycle it began in, its task, its index in the group."""
    if r.carry is not None:
        return (r.carry["started_cycle"], r.task.task_id, r.sample_index)
    return (cycle if r.started_cycle is None else r.started_cycle, r.task.task_id, r.sample_index)


def train_batch(ctx, rollouts) -> tuple[int, int]:
    """(samples, tokens) the update stage would build from these scored rollouts."""
    from flywheel.storage.schema import TRAJECTORY_SCHEMA, to_table
    from flywheel.tasks.records import trajectory_record
    from flywheel.tasks.update import build_batch

    if not rollouts:
        return 0, 0
    rows = [trajectory_record(ctx, r, r.episode_score) for r in rollouts]
    samples, _ = build_batch(
        to_table(rows, TRAJECTORY_SCHEMA), drop_zero_variance=False, trainer_version=ctx.policy_version
    )
    return len(samples), sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)


def play_cycle(parts, arm: Arm, cycle: int, tasks) -> dict:
    """One generate stage of `arm`; its accounting (see the module docstring)."""
    from flywheel.storage.carried import carried_table
    from flywheel.tasks import generate as stage
    from flywheel.tasks.carry import split_parked
    from flywheel.tasks.context import StageContext

    cfg = arm.config
    ctx = StageContext(config=cfg, run_id=f"bench-{arm.name}", cycle=cycle, label="train", policy_version=cycle,
                       policy_lag=0, generation=cfg.generation)  # fmt: skip
    carried_in = {(r["started_cycle"], r["task_id"], r["sample_index"]) for r in arm.carried}
    t0 = time.perf_counter()
    out = stage.play_episodes(parts, ctx, tasks, stage.sampling_spec(ctx), arm.carried)
    seconds = time.perf_counter() - t0
    stats = stage.generation_stats(out)
    done, parked = split_parked(out)
    arm.carried = carried_table(parked).to_pylist()  # through the lake's schema, as the flow reads them back
    sampled = 0
    for r in out:
        k = episode_key(r, cycle)
        arm.ledger[k] = arm.ledger.get(k, 0) + r.timings.get("sampled_tokens", 0)
        sampled += r.timings.get("sampled_tokens", 0)
    seen = {episode_key(r, cycle) for r in out}
    stale = [k for k in carried_in if k not in seen]  # dropped by the staleness bound (restarted anew)
    ends = Counter()
    tokens = Counter()
    rewards: dict[str, list[float]] = {"completed": [], "cut": [], "other": []}
    for r in done:
        kind = (
            "completed"
            if r.finish_reason in NATURAL
            else "cut"
            if r.finish_reason == "stage_budget"
            else "other"
        )
        ends[kind] += 1
        tokens[kind] += arm.ledger.pop(episode_key(r, cycle))
        if kind == "cut" and not r.num_turns:
            ends["cut_unbegun"] += 1
        rewards[kind].append(round(r.episode_score.reward, 4))
        arm.ends[(r.task.task_id, r.sample_index)] = (kind, r.episode_score.reward)
    tokens["discarded"] = sum(arm.ledger.pop(k) for k in stale)
    scored = train_batch(ctx, done)
    kept = train_batch(ctx, [r for r in done if r.finish_reason != "stage_budget"])
    row = {
        "arm": arm.name, "cycle": cycle, "generated": sampled, "completed": ends["completed"],
        "completed_tokens": tokens["completed"], "cut": ends["cut"], "cut_unbegun": ends["cut_unbegun"],
        "cut_tokens": tokens["cut"], "other": ends["other"], "other_tokens": tokens["other"],
        "stale_episodes": len(stale), "discarded_tokens": tokens["discarded"], "parked": len(parked),
        "parked_tokens": sum(arm.ledger.values()),
        "train_samples": scored[0], "train_tokens": scored[1],
        "train_samples_without_cut": kept[0], "train_tokens_without_cut": kept[1],
        "solved": sum(r.episode_score.verdict == "pass" for r in done),
        "rewards": rewards,  # each ended episode's reward, by how it ended
        "slot_utilisation": stats.get("slot_utilisation"), "generate_s": round(seconds, 1),
    }  # fmt: skip
    arm.cycles.append(row)
    return row


def totals(arm: Arm) -> dict:
    keys = ["generated", "completed", "completed_tokens", "cut", "cut_unbegun", "cut_tokens", "other", "other_tokens",
            "stale_episodes", "discarded_tokens", "train_samples", "train_tokens", "train_samples_without_cut",
            "train_tokens_without_cut", "generate_s"]  # fmt: skip
    t = {k: sum(c[k] for c in arm.cycles) for k in keys}
    t["generate_s"] = round(t["generate_s"], 1)
    t["in_flight_tokens"] = sum(arm.ledger.values())
    t["in_flight_episodes"] = len(arm.carried)
    t["completed_per_cycle"] = [c["completed"] for c in arm.cycles]
    accounted = sum(t[k] for k in ("completed_tokens", "cut_tokens", "other_tokens", "discarded_tokens"))
    t["balanced"] = accounted + t["in_flight_tokens"] == t["generated"]
    t["tokens_per_s"] = round(t["generated"] / t["generate_s"], 1) if t["generate_s"] else None
    t["solved"] = sum(c["solved"] for c in arm.cycles)
    t["drawn"] = len(arm.drawn)
    # the rewards of the episodes of each kind (cut: unbegun ones too)
    for kind in ("completed", "cut", "other"):
        t[f"{kind}_reward_total"] = round(sum(sum(c["rewards"][kind]) for c in arm.cycles), 4)
    return t


def trained_rewards(arm: Arm, drop_cut: bool) -> list[float]:
    """The rewards of the episodes the update would train on (cut ones unless `drop_cut`)."""
    kinds = ("completed", "other") if drop_cut else ("completed", "cut", "other")
    return [x for c in arm.cycles for k in kinds for x in c["rewards"][k]]


def by_task(arm: Arm) -> dict[str, float]:
    """task -> the fraction of its drawn episodes that ran to their natural end (a group's
    episodes share a task, so the task, not the episode, is the unit resampled)."""
    out: dict[str, list[int]] = {}
    for key in arm.drawn:
        out.setdefault(key[0], []).append(arm.ends.get(key, ("",))[0] == "completed")
    return {task: sum(v) / len(v) for task, v in out.items()}


def rates(arms: dict[str, Arm]) -> dict:
    """The rates the arms are compared on, with n and 95% intervals (flywheel/reports/stats.py):
    completion per drawn episode (Wilson per arm; the difference paired over tasks, both arms
    drew the same), train samples per cycle (paired over cycles), the mean reward of the
    trained episodes (bootstrap over episodes, partial against each reading of cut)."""
    from flywheel.reports.stats import paired, unpaired, wilson

    cut, partial = arms["cut"], arms["partial"]
    out: dict = {"completion": {}, "reward": {}}
    for arm in (cut, partial):
        k, n = sum(v[0] == "completed" for v in arm.ends.values()), len(arm.drawn)
        out["completion"][arm.name] = {"k": k, "n": n, "rate": round(k / n, 4) if n else None,
                                       "ci": [round(x, 4) for x in wilson(k, n)]}  # fmt: skip
    out["completion"]["partial_minus_cut"] = paired(by_task(cut), by_task(partial)).as_dict()
    samples = {a.name: {str(c["cycle"]): c["train_samples"] for c in a.cycles} for a in (cut, partial)}
    out["train_samples_per_cycle"] = paired(samples["cut"], samples["partial"]).as_dict()
    base = trained_rewards(partial, drop_cut=False)
    for label, drop in (("scored", False), ("thrown_away", True)):
        them = trained_rewards(cut, drop)
        if them and base:
            d = unpaired(them, base).as_dict()
            out["reward"][f"partial_minus_cut_{label}"] = {**d, "n": f"{len(base)} partial, {len(them)} cut"}
    return out


def compare(parts, base, *, level: int, tasks: int, cycles: int, budget: int, max_lag: int = 2,
            seed: int = 1000, log=print) -> dict[str, Arm]:  # fmt: skip
    """Both arms over `cycles` cycles on `parts` (engine, tokenizer, sandbox); `base` is
    the FlywheelConfig both share, the arm sets generation.partial."""
    from flywheel.config.long_horizon import PartialConfig

    env = parts.domains["longhorizon"]
    arms = {}
    for name, on_budget in ARMS.items():
        partial = PartialConfig(stage_tokens=budget, on_budget=on_budget, max_lag=max_lag, stale="restart")
        generation = base.generation.model_copy(update={"partial": partial})
        arms[name] = Arm(name, base.model_copy(update={"generation": generation}))
    for cycle in range(cycles):
        todo = env.make_tasks("train", level, seed + cycle, tasks)
        for arm in arms.values():
            arm.drawn += [(t.task_id, i) for t in todo for i in range(base.generation.k)]
            log(json.dumps(play_cycle(parts, arm, cycle, todo)))
    return arms


def table(arms: dict[str, Arm], r: dict | None = None) -> str:
    """The markdown table and the comparisons; `r`: `rates(arms)` when already computed."""
    cut, partial = totals(arms["cut"]), totals(arms["partial"])
    lines = [
        (
            "| arm | sampled tokens | in completed episodes | in cut episodes | other ends | discarded | in flight "
            "| completed per cycle (total; solved) | cut (of them unbegun) | train samples (tokens) "
            "| reward of trained episodes: total (n) | generate s | tok/s |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        ("cut, scored as they are", "cut", cut, False),
        ("cut, thrown away", "cut", cut, True),
        ("partial", "partial", partial, False),
    ]
    for label, name, t, drop in rows:
        cut_col = f"{t['cut_tokens']}" + (" (discarded)" if drop else "")
        discarded = t["discarded_tokens"] + (t["cut_tokens"] if drop else 0)
        samples = (t["train_samples_without_cut"], t["train_tokens_without_cut"]) if drop else (t["train_samples"], t["train_tokens"])  # fmt: skip
        rewards = trained_rewards(arms[name], drop)
        lines.append(
            f"| {label} | {t['generated']} | {t['completed_tokens']} | {cut_col} | {t['other_tokens']} | {discarded} "
            f"| {t['in_flight_tokens']} ({t['in_flight_episodes']} eps) | {', '.join(map(str, t['completed_per_cycle']))} "
            f"({t['completed']}; {t['solved']}) | {t['cut']} ({t['cut_unbegun']}) | {samples[0]} ({samples[1]}) "
            f"| {sum(rewards):.2f} ({len(rewards)}) | {t['generate_s']} | {t['tokens_per_s']} |"
        )  # fmt: skip

    def ratio(a, b):
        return f"{a / b:.2f}" if b else ("inf" if a else "-")

    def diff(d, unit=""):
        return (f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], n={d['n']}{unit}"
                + ("" if d["resolvable"] else ", not resolvable"))  # fmt: skip

    r = r or rates(arms)
    done = r["completion"]
    lines += [
        "",
        (f"partial/cut: completed episodes {ratio(partial['completed'], cut['completed'])}, tokens in completed "
        f"episodes {ratio(partial['completed_tokens'], cut['completed_tokens'])}, train samples "
        f"{ratio(partial['train_samples'], cut['train_samples'])} against scored-as-they-are, "
        f"{ratio(partial['train_samples'], cut['train_samples_without_cut'])} against thrown-away, "
        f"sampled tokens {ratio(partial['generated'], cut['generated'])}, generate seconds "
        f"{ratio(partial['generate_s'], cut['generate_s'])}"),
        "",
        (f"completed per drawn episode (95% Wilson): cut {done['cut']['k']}/{done['cut']['n']} "
         f"[{done['cut']['ci'][0]:.3f}, {done['cut']['ci'][1]:.3f}], partial {done['partial']['k']}/"
         f"{done['partial']['n']} [{done['partial']['ci'][0]:.3f}, {done['partial']['ci'][1]:.3f}] (still in flight "
         f"counts as not completed); partial - cut {diff(done['partial_minus_cut'], ' tasks')} (paired bootstrap)"),
        f"train samples per cycle, partial - cut (scored as they are): {diff(r['train_samples_per_cycle'], ' cycles')} (paired)",
    ]  # fmt: skip
    for label, d in r["reward"].items():
        lines.append(f"mean reward of a trained episode, {label.replace('_', ' ')}: {d['b']:.3f} - {d['a']:.3f} = "
                     f"{diff(d)} (bootstrap over episodes)")  # fmt: skip
    return "\n".join(lines)


def measure(parts, base, args, budget: int, head: str) -> None:
    """Both arms at one budget; writes cycles.jsonl (as the cycles go), summary.json and
    table.md under --out/budget-N."""
    out = Path(args.out) / f"budget-{budget}"
    out.mkdir(parents=True, exist_ok=True)
    head = f"{head}, budget {budget} tokens a cycle"
    print(head, flush=True)
    with open(out / "cycles.jsonl", "w") as log:

        def emit(line: str) -> None:
            print(line, flush=True)
            log.write(line + "\n")
            log.flush()

        t0 = time.perf_counter()
        arms = compare(parts, base, level=args.level, tasks=args.tasks, cycles=args.cycles, budget=budget,
                       max_lag=args.max_lag, log=emit)  # fmt: skip
        wall = time.perf_counter() - t0
    compared = rates(arms)
    summary = {"setup": head, "command": " ".join(["python", *sys.argv]), "args": vars(args), "budget": budget,
               "wall_s": round(wall, 1), "totals": {name: totals(arm) for name, arm in arms.items()},
               "rates": compared}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = table(arms, compared)
    (out / "table.md").write_text(f"{head}\n\n{text}\n")
    print("\n" + text + "\n", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument(
        "--budget",
        type=int,
        nargs="+",
        required=True,
        help="sampled tokens per cycle's generate stage (each in turn)",
    )
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--level", type=int, default=1, help="longhorizon level: 1, 2, 3 = 4, 16, 64 steps")
    ap.add_argument(
        "--max-turns", type=int, default=8, help="turn cap per episode (the domain's own may be lower)"
    )
    ap.add_argument("--tasks", type=int, default=2, help="new tasks per cycle")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4, help="live episodes at once (sandbox concurrency)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per turn")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-lag", type=int, default=2)
    ap.add_argument("--out", default=f"bench/results/partial-vs-cut-{date.today().isoformat()}")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from flywheel.config import FlywheelConfig
    from flywheel.environments.registry import Domains
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.policy.engines.vllm_engine import VLLMEngine
    from flywheel.run.model_prep import resolve_model
    from flywheel.tasks import generate as stage
    from flywheel.tasks.context import StageContext

    base = FlywheelConfig(
        run_id="bench", engine={"max_model_len": args.max_model_len}, sandbox={"concurrency": args.slots},
        generation={"k": args.k, "max_tokens": args.max_tokens, "max_turns": args.max_turns},
        trainer={"drop_zero_variance_groups": False},
    )  # fmt: skip
    model = resolve_model(args.model or base.model.path, base.model.cache_dir)
    engine = VLLMEngine(model, base.engine, base.seed)
    sandbox = make_sandbox(base.sandbox)
    sandbox.warm()
    parts = Parts(engine, AutoTokenizer.from_pretrained(model), Domains(["longhorizon"]), sandbox)
    head = (f"{model}: level {args.level}, {args.tasks} tasks x k={args.k} a cycle, {args.slots} slots, turn cap "
            f"{args.max_turns}, {args.max_tokens} tokens a turn, {args.cycles} cycles, max_lag {args.max_lag}, "
            f"{base.engine.dtype}")  # fmt: skip
    try:  # warm-up: the engine's first requests, one short episode, not counted
        ctx = StageContext(config=base, run_id="warm", cycle=0, label="warm", policy_version=0, policy_lag=0,
                           generation=base.generation.model_copy(update={"max_turns": 2, "k": 1}))  # fmt: skip
        warm = parts.domains["longhorizon"].make_tasks("train", args.level, 1, 1)
        stage.play_episodes(parts, ctx, warm, stage.sampling_spec(ctx))
        for budget in args.budget:  # one engine for all: each budget's files are written as it ends
            measure(parts, base, args, budget, head)
    finally:
        sandbox.close()
        engine.close()


if __name__ == "__main__":
    main()
