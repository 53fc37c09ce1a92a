"""Stage 1, sample: this cycle's tasks = the replay queue (failures of earlier cycles)
plus fresh train-split tasks over the configured domains and the levels the curriculum
(tasks/curriculum.py) has opened, weighted by how much there is to learn at each.

Fresh tasks are seeded by (run seed, cycle, domain, level), so a re-run of a cycle draws
the same tasks. Only the train split is ever sampled here; eval tasks come from the
evaluation flow and never reach training.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.environments.registry import expand_all, mixture
from flywheel.policy.chat import encode_chat
from flywheel.reports.summary import publish_table
from flywheel.tasks.context import SampleRun
from flywheel.tasks.curriculum import allot, arm_rows, cell_weights, eval_prior, level_stats, thompson
from flywheel.storage.schema import TaskSpec, stable_id


def sampled_levels(domains, sampler) -> dict[str, list[int]]:
    """Each sampled domain (by its name) with the configured levels it has; a domain
    with none of them (a task file of other levels) keeps its own."""
    out = {}
    for spec in expand_all(sampler.domains):
        env = domains[spec]
        out[env.name] = [lvl for lvl in sampler.levels if lvl in env.levels] or list(env.levels)
    return out


def domain_mix(domains, sampler) -> dict[str, float]:
    """Each sampled domain's (by name) mixing weight (environments/registry.py:mixture)."""
    return {domains[spec].name: w for spec, w in mixture(sampler.domains, sampler.weights).items()}


def fresh_plan(levels: dict[str, list[int]], count: int, start: int = 0) -> Counter:
    """How many fresh tasks per (domain, level): round-robin, domains first, from the
    `start`-th (the sampler passes cycle x count, so that with more domains than tasks a
    cycle each cycle takes the next ones, not the first ones again)."""
    plan: Counter = Counter()
    names = list(levels)
    for i in range(start, start + count):
        d = names[i % len(names)]
        plan[(d, levels[d][(i // len(names)) % len(levels[d])])] += 1
    return plan


def fresh_tasks(domains, run_seed: int, cycle: int, plan: Counter) -> list[TaskSpec]:
    """`cycle`'s fresh train tasks for a plan of counts per (domain, level). Seeded by
    (run seed, cycle, domain, level), so the same on every machine, and a smaller count
    draws a prefix of a larger one (bench/vs_trl.py gives TRL this same stream)."""
    fresh: list[TaskSpec] = []
    for (domain, level), count in sorted(plan.items()):
        seed = int(stable_id("fresh", run_seed, cycle, domain, level), 16) % (2**62)
        fresh += domains[domain].make_tasks("train", level, seed, count)
    return fresh


@task(name="sample", cache_policy=NO_CACHE)
def sample(rt: SampleRun, cycle: int, carrying: int = 0) -> list[TaskSpec]:
    """`carrying`: the groups the last cycle parked (partial rollouts, tasks/carry.py), which
    this cycle plays first. They take places of `sampler.tasks_per_cycle`, before replay and
    fresh tasks, so a run whose episodes outlast its generate budget works off its backlog
    instead of adding a full cycle of new groups to it each cycle (bench/README.md, partial
    rollouts against cutting). A stale carried group that is dropped still takes its place
    for this cycle."""
    cfg = rt.config
    places = max(0, cfg.sampler.tasks_per_cycle - carrying)
    replayed = (rt.lake.read_replay_queue(rt.run_id, cycle) or []) if cfg.replay.enabled else []
    replayed = replayed[: min(places, int(cfg.sampler.tasks_per_cycle * cfg.sampler.max_replay_fraction))]
    count = places - len(replayed)
    levels = sampled_levels(rt.domains, cfg.sampler)
    if cfg.curriculum.enabled:
        cur = cfg.curriculum
        stats = level_stats(rt.lake, rt.run_id, cycle - 1, cur.window_cycles)
        prior = eval_prior(rt.lake, rt.run_id, rt.policy_version, cfg.generation.k)
        mix, seed = domain_mix(rt.domains, cfg.sampler), int(stable_id("plan", cfg.seed, cycle), 16)
        if cur.strategy == "thompson":
            plan, weights = thompson(levels, count, stats, cur.open_threshold, cur.prior_strength, prior, mix, seed,
                                     cur.max_arm_share)  # fmt: skip
        else:
            weights = cell_weights(levels, stats, cur.open_threshold, cur.min_weight, prior, mix)
            plan = allot(weights, count, seed)
        publish_table(rt.run_id, "arms", arm_rows(weights, stats, plan), f"cycle {cycle}: the sampler's arms")
    else:
        plan = fresh_plan(levels, count, start=cycle * count)
    fresh = fresh_tasks(rt.domains, cfg.seed, cycle, plan)
    taken = {t.task_id for t in replayed}
    fresh = [dataclasses.replace(t, origin_cycle=cycle) for t in fresh if t.task_id not in taken]
    budget = cfg.engine.max_model_len - cfg.generation.max_tokens
    return quarantine_long_prompts(
        replayed + fresh, rt.tokenizer, budget, rt.run_dir / "quarantine" / f"cycle-{cycle}.jsonl"
    )


def quarantine_long_prompts(tasks: list[TaskSpec], tokenizer, budget: int, path: Path) -> list[TaskSpec]:
    """Tasks whose prompt leaves no room to answer within the engine's context are set
    aside (written to `path` with the reason, and logged) instead of failing the cycle."""
    kept: list[tuple[TaskSpec, int]] = []
    dropped: list[tuple[TaskSpec, int]] = []
    for t in tasks:
        n = len(encode_chat(tokenizer, t.prompt))
        (kept if n <= budget else dropped).append((t, n))
    if dropped:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            for t, n in dropped:
                reason = f"prompt is {n} tokens; engine.max_model_len - generation.max_tokens = {budget}"
                f.write(
                    json.dumps({"task_id": t.task_id, "domain": t.domain, "level": t.level, "reason": reason})
                    + "\n"
                )
        logging.getLogger("flywheel").warning(
            "quarantined %d tasks with over-long prompts: see %s", len(dropped), path
        )
    return [t for t, _ in kept]
