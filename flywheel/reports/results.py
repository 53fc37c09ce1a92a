"""Typed results that flows return: what a notebook or a caller gets back.

Plain pydantic models (so Prefect can serialise them) with `frame()` helpers that turn
them into pandas DataFrames for analysis.
"""

from __future__ import annotations

from pydantic import BaseModel


class CycleSummary(BaseModel):
    run_id: str
    cycle: int
    policy_version: int
    tasks: int
    replayed_tasks: int
    trajectories: int
    mean_reward: float
    pass_rate: float
    queued_for_replay: int
    stage_s: dict[str, float]  # empty when every stage was resumed from the lake
    update: dict[str, float | int | str]
    by_domain_level: list[dict]  # domain, level, trajectories, mean_reward, pass_rate
    finished_at: str
    # the episodes' engine use in generate (tasks/generate.py generation_stats): slot_utilisation,
    # episode_tokens(_per_s), parked, carried_finished; empty without episodes or when resumed
    generation: dict[str, float] = {}

    def line(self) -> str:
        stages = "  ".join(f"{k} {v:.1f}s" for k, v in self.stage_s.items()) or "(resumed from the lake)"
        g = self.generation
        slots = (f"\n    episodes: slots {100 * g['slot_utilisation']:.0f}% busy, {g['episode_tokens_per_s']:.1f} tok/s, "
                 f"{g['parked']:.0f} parked, {g['carried_finished']:.0f} carried in and finished") if g else ""  # fmt: skip
        u = self.update
        live = (f"\n    live sessions (update of cycle {u.get('update_cycle', self.cycle)}): {u['live_sessions']} "
                f"trained on ({u['live_tokens']} sampled tokens), {u['live_kept']} kept for SFT/eval only "
                f"(stale or not RL-usable), {u['live_failed']} failed to replay") if "live_sessions" in u else ""  # fmt: skip
        return (
            f"cycle {self.cycle}: {self.tasks} tasks ({self.replayed_tasks} replayed), "
            f"{self.trajectories} trajectories, mean reward {self.mean_reward:.3f}, "
            f"pass rate {self.pass_rate:.3f}, policy v{self.policy_version}, "
            f"{self.queued_for_replay} queued for replay\n    {stages}{slots}{live}"
        )


class EvalResult(BaseModel):
    run_id: str
    policy_version: int
    rows: list[
        dict
    ]  # per cell: domain, level, n, solved, pass@1, ci_low, ci_high, [pass@k], mean_reward, ...
    groups: list[dict] = []  # per group (held-out, each suite): n, solved, pass@1, ci_low, ci_high
    # per group, this version minus `base_version` (the run's first evaluated one: v0, or v1
    # after a cold start) on the same tasks: diff, ci_low, ci_high, resolvable
    vs_base: list[dict] = []
    base_version: int | None = None
    # per mode, domain and level of the episode domains (flywheel/reports/agentic_report.py):
    # completion with ci_low/ci_high, pass@k, pass^k, turns and tokens per solved, call
    # validity and accuracy, wall seconds, and one count per failure; [] without episodes
    agentic: list[dict] = []
    k: int = 0
    wall_s: float = 0.0

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def agentic_frame(self):
        """The agentic metrics of the episode domains, one row per mode, domain and level."""
        import pandas as pd

        return pd.DataFrame(self.agentic)

    def metric(self, group: str) -> float | None:
        """Pooled pass@1 of a group ("held-out" or a suite), None when not evaluated."""
        return next((g["pass@1"] for g in self.groups if g["group"] == group), None)


class FlywheelResult(BaseModel):
    run_id: str
    run_dir: str
    lake_uri: str
    cycles: list[CycleSummary]
    evaluations: list[EvalResult] = []  # in the loop: the starting policy, every N cycles, the last one

    def frame(self):
        """One row per cycle: rewards, pass rate, and seconds per stage."""
        import pandas as pd

        rows = []
        for c in self.cycles:
            row = c.model_dump(exclude={"stage_s", "update", "by_domain_level"})
            row.update({f"{k}_s": v for k, v in c.stage_s.items()})
            rows.append(row)
        return pd.DataFrame(rows)

    def agentic(self):
        """The agentic metrics of every evaluation, one row per policy version, mode,
        domain and level (empty without episode domains)."""
        import pandas as pd

        rows = [{"policy_version": e.policy_version, **row} for e in self.evaluations for row in e.agentic]
        return pd.DataFrame(rows)

    def by_domain_level(self):
        """One row per cycle, domain and level."""
        import pandas as pd

        return pd.DataFrame([{"cycle": c.cycle, **row} for c in self.cycles for row in c.by_domain_level])
