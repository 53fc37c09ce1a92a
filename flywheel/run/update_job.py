"""One update as a standalone job, for several DeepSpeed ranks on one or many machines.

The flywheel on one CPU runs its update in-process. With more ranks, launch this with
torchrun or the deepspeed launcher (a hostfile for several nodes); every rank reads the
cycle's committed trajectories from the lake, takes its share, and rank 0 exports the
new weights (and, with --checkpoint-dir, the DeepSpeed checkpoint that the next
update resumes from). With the config's `distill` on, each rank's teacher scores that
rank's share of the batch (policy/teacher.py):

    torchrun --nproc_per_node 2 -m flywheel.run.update_job --lake runs/R/lake --run-id R \\
        --cycle 0 --model MODEL_DIR --out runs/R/policy/v1 [--checkpoint-dir D --tag v1] \
        [--kl-reference SFT_OR_BASE_DIR]
"""

from __future__ import annotations

import argparse
import json
import os


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lake", required=True)
    ap.add_argument("--endpoint")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--cycle", type=int, required=True)
    ap.add_argument("--model", required=True, help="the weights this update starts from")
    ap.add_argument("--out", required=True, help="where rank 0 exports the new HF dir")
    ap.add_argument("--config", help="a flywheel YAML config (its trainer section is used)")
    ap.add_argument(
        "--kl-reference",
        help="the policy trainer.kl_coef holds the update near: the run's SFT policy, else its base "
        "model (flywheel/run/runtime.py's kl_reference). Default --model, against which a one-step job's "
        "penalty is 0",
    )
    ap.add_argument("--checkpoint-dir")
    ap.add_argument("--resume-tag", help="load this DeepSpeed checkpoint first")
    ap.add_argument("--tag", help="save a DeepSpeed checkpoint under this tag")
    args = ap.parse_args(argv)

    import flywheel

    flywheel.use_offline_defaults()  # a program of its own (torchrun, deepspeed)
    from flywheel.config import FlywheelConfig
    from flywheel.policy.trainer import GRPOTrainer
    from flywheel.storage.lake import Lake
    from flywheel.tasks.update import cycle_batch

    config = FlywheelConfig.from_yaml(args.config) if args.config else FlywheelConfig()
    lake = Lake(args.lake, args.endpoint)
    distill = config.distill.mode != "off"
    drop_flat = config.trainer.drop_zero_variance_groups and not distill  # a teacher's signal: every group
    samples, stats = cycle_batch(lake, args.run_id, args.cycle, drop_flat, None, config.engine_mismatch)
    if not samples:
        raise SystemExit("no trajectory with a learning signal in this cycle")
    trainer = GRPOTrainer(args.model, config.trainer, reference_dir=args.kl_reference, distill=config.distill)
    if distill:
        from flywheel.policy.batching import rank_share
        from flywheel.policy.teacher import Teacher
        from flywheel.run.model_prep import resolve_model

        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        mine = rank_share(samples, rank, world, trainer.min_shared_prompt() is not None)  # as step() splits
        teacher = Teacher(resolve_model(config.distill.teacher, config.model.cache_dir), config.distill)
        stats.update(teacher.annotate(mine))
    if args.resume_tag:
        trainer.load_checkpoint(args.checkpoint_dir, args.resume_tag)
    metrics = {**stats, **trainer.step(samples), "world_size": int(os.environ.get("WORLD_SIZE", "1"))}
    trainer.export(args.out)
    if args.tag:
        trainer.save_checkpoint(args.checkpoint_dir, args.tag)
    if int(os.environ.get("RANK", "0")) == 0:
        print("UPDATE " + json.dumps(metrics), flush=True)
    return metrics


if __name__ == "__main__":
    main()
