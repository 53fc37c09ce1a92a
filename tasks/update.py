"""Stage 6, update: one GRPO step on the cycle's committed train trajectories, read back
from the lake (so an update can be re-run or resumed); then `sync` puts the new weights
into the running engine and a probe checks that engine and trainer agree token by token.
In online mode the batch also holds the live sessions the cycle's `live` stage claimed
(flywheel/gateway/online.py), with their workload-baseline advantages and their recorded
behaviour logprobs. With on-policy distillation (`distill.mode` only or add) the teacher
scores the batch's tokens here, just before the step (policy/teacher.py); its logprobs are
not kept in the lake.

The two are separate tasks so that an asynchronous run (pipeline.max_policy_lag > 0,
flywheel/run/pipeline.py) can train in the background while the engine generates the next
cycle, and sync only between generations. The trainer's side of the probe is computed
inside `update`, right after its step, so `sync` never touches the trainer while a later
update may be running.

Order matters for resume: export, then the DeepSpeed checkpoint, then both are published
to the lake with the manifest last (storage/policies.py). A crash before the manifest is
written re-runs the update from the previous checkpoint; after it, the update is never
repeated, and a restarted engine loads the published weights (no sync is lost).
"""

from __future__ import annotations

import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.gateway.online import claimed_samples
from flywheel.policy.grpo import group_advantages, zero_variance_groups
from flywheel.policy.trainer import TrainSample
from flywheel.tasks.context import SyncRun, UpdateRun
from flywheel.tasks.stepwise import samples_of, turn_baselines


def cycle_batch(
    lake,
    run_id: str,
    cycle: int,
    drop_zero_variance: bool,
    trainer_version: int | None = None,
    engine_mismatch: bool = False,
) -> tuple[list[TrainSample], dict]:
    """A committed cycle's trajectories as a training batch. Not filtered by split on
    purpose: a cycle holds train tasks only, and an eval row there must stop the update."""
    table = lake.trajectories(run_id, cycles=[cycle])
    return build_batch(table, drop_zero_variance, trainer_version, engine_mismatch)


def build_batch(
    table, drop_zero_variance: bool, trainer_version: int | None = None, engine_mismatch: bool = False
) -> tuple[list[TrainSample], dict]:
    """Trajectories -> train samples with group-normalised advantages, one per turn for a
    step-wise episode (tasks/stepwise.py). A sample's policy
    lag is the trainer's version minus the version that generated it (when the trainer's
    version is known), else the lag recorded at generation. `engine_mismatch`: the
    engine's numerics differ from the trainer's (FlywheelConfig.engine_mismatch)."""
    splits = set(table.column("split").to_pylist())
    if splits - {"train"}:
        raise ValueError(f"the update read non-train trajectories (splits {sorted(splits)}): refusing")
    # turns: null for whole-episode samples, and in files older than schema v6
    rows = table.select(
        ["group_id", "reward", "prompt_token_ids", "completion_token_ids", "completion_logprobs", "policy_version",
         "policy_lag", "turns"]
    ).to_pylist()  # fmt: skip
    rewards = [r["reward"] for r in rows]
    groups = [r["group_id"] for r in rows]
    adv = group_advantages(rewards, groups)
    flat = zero_variance_groups(rewards, groups)
    keep = [
        i
        for i, r in enumerate(rows)
        if r["completion_token_ids"] and not (drop_zero_variance and r["group_id"] in flat)
    ]

    def lag(version: int, recorded: int | None) -> int:
        if trainer_version is not None:
            return max(0, trainer_version - version)
        return recorded or 0  # null in files older than schema v3

    baselines = turn_baselines([rows[i] for i in keep])  # one sample per turn where a row has turns
    samples = [s for i in keep for s in samples_of(rows[i], adv[i], lag, engine_mismatch, baselines)]
    stats = {"groups": len(set(groups)), "zero_variance_groups": len(flat), "train_samples": len(samples),
             "max_policy_lag": max((s.policy_lag for s in samples), default=0)}  # fmt: skip
    return samples, stats


@task(name="update", cache_policy=NO_CACHE)
def update(rt: UpdateRun, cycle: int) -> dict:
    """Train on `cycle`, publish the new version; returns metrics and, for `sync`, the
    version and the trainer's logprobs on two probe sequences."""
    cfg = rt.config.trainer
    t_start = time.monotonic()
    trainer = rt.trainer
    teacher = rt.teacher
    drop_flat = cfg.drop_zero_variance_groups and teacher is None  # a teacher's signal is in every group
    samples, stats = cycle_batch(
        rt.lake, rt.run_id, cycle, drop_flat, rt.policy_version, rt.config.engine_mismatch
    )
    # online mode: the live sessions the `live` stage claimed for this cycle (none without a claim)
    live, live_stats = claimed_samples(
        rt.lake, rt.run_id, cycle, rt.policy_version, rt.config.engine_mismatch
    )
    samples, stats = samples + live, {**stats, **live_stats}
    if not samples:  # nothing to learn from; record it so a resume does not retry
        rt.record_update(cycle, rt.policy_version, None)
        return {**stats, "skipped": "every group had equal rewards", "update_s": time.monotonic() - t_start}
    if teacher is not None:
        stats.update(teacher.annotate(samples))
    t0 = time.monotonic()
    metrics = trainer.step(samples)
    metrics["step_s"] = time.monotonic() - t0
    version = rt.policy_version + 1
    t0 = time.monotonic()
    export_dir = trainer.export(rt.staging_dir(f"v{version}"))
    metrics["export_s"] = time.monotonic() - t0
    seqs = [s.prompt_ids + s.completion_ids for s in samples[:2]]
    lens = [len(s.prompt_ids) for s in samples[:2]]
    probe = {"sequences": seqs, "prompt_lens": lens, "trainer_logprobs": trainer.logprobs(seqs, lens)}
    checkpoint = None
    if cfg.save_checkpoints:
        t0 = time.monotonic()
        checkpoint = (rt.staging_dir("checkpoint"), f"v{version}")
        trainer.save_checkpoint(*checkpoint)
        metrics["checkpoint_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    rt.record_update(cycle, version, export_dir, checkpoint)
    metrics["publish_s"] = time.monotonic() - t0
    metrics["update_s"] = time.monotonic() - t_start
    return {**stats, **metrics, "policy_version": version, "probe": probe}


def sync_tolerance(config) -> float:
    """The mean |logprob difference| a sync may show: fp32 on both sides agrees to ~1e-5;
    bf16 on either side (the engine's dtype, or the trainer's autocast) differs by
    rounding, not by policy, which a wrong or stale weight load exceeds by far."""
    return 1e-3 if config.engine.dtype == "float32" and not config.trainer_bf16 else 0.1


@task(name="sync", cache_policy=NO_CACHE)
def sync(rt: SyncRun, update_result: dict) -> dict:
    """Load the version `update_result` made into the engine and check the engine now
    scores the probe sequences as the trainer did."""
    version = update_result.get("policy_version")
    if version is None or version == rt.engine_version:
        return {}
    t0 = time.monotonic()
    rt.load_policy_into_engine(version)
    metrics = {"sync_s": time.monotonic() - t0}
    probe = update_result["probe"]
    engine_lps = rt.engine.prompt_logprobs(probe["sequences"], probe["prompt_lens"])
    diffs = [abs(a - b) for u, v in zip(probe["trainer_logprobs"], engine_lps) for a, b in zip(u, v)]
    metrics["sync_max_logprob_diff"] = max(diffs)
    metrics["sync_mean_logprob_diff"] = sum(diffs) / len(diffs)
    tolerance = sync_tolerance(rt.config)
    if metrics["sync_mean_logprob_diff"] > tolerance:
        raise RuntimeError(
            f"weight sync failed: engine and trainer logprobs differ by {metrics['sync_mean_logprob_diff']:.3g} "
            f"on average (max {max(diffs):.3g}); tolerance {tolerance}"
        )
    return metrics
