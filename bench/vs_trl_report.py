"""bench/vs_trl.py's report: time to TRL's final reward per side, the table and the plot."""

from __future__ import annotations

from pathlib import Path

SIDES = ("trl", "flywheel")

# ---- report -----------------------------------------------------------------------------------


def time_to(points: list[dict], target: float) -> float | None:
    """The wall time of the first point whose held-out reward reaches `target`."""
    return next((p["t"] for p in points if p["reward"] >= target - 1e-9), None)


def trl_curves(evaluated: list[dict], round_: int) -> dict:
    """TRL's points of `round_` by learning rate (one curve without a sweep)."""
    curves: dict = {}
    for p in evaluated:
        if p["side"] == "trl" and p["round"] == round_:
            curves.setdefault(p.get("lr"), []).append(p)
    return curves


def gain(a: dict, b: dict) -> dict | None:
    """b's held-out reward minus a's, paired over the same tasks (bootstrap 95%), when
    both points carry their per-task rewards."""
    from flywheel.reports.stats import paired

    if "rewards" not in a or "rewards" not in b:
        return None
    return paired(dict(enumerate(a["rewards"])), dict(enumerate(b["rewards"]))).as_dict()


def summarise(bench, evaluated: list[dict]) -> list[dict]:
    """Per round: each TRL learning rate's final reward and the best one; each side's final
    gain over the base model and the flywheel's over TRL's best, paired with intervals;
    the time each side needed to reach TRL's best final reward, and the ratio."""
    base = next(p for p in evaluated if p["side"] == "base")
    out = []
    for round_ in range(bench.rounds):
        arms = trl_curves(evaluated, round_)
        finals = {lr: c[-1]["reward"] for lr, c in arms.items()}
        best = max(finals, key=lambda lr: finals[lr])
        flywheel = [p for p in evaluated if p["side"] == "flywheel" and p["round"] == round_]
        curve = {"trl": [base] + arms[best], "flywheel": [base] + flywheel}
        trl_final, fly_final = curve["trl"][-1], curve["flywheel"][-1]
        target = trl_final["reward"]
        row = {
            "round": round_,
            "order": "-".join(bench.side_order(round_)),
            "base_reward": base["reward"],
            "trl_final_reward": target,
            "trl_best_lr": best,
            "trl_finals": {f"{lr:g}" if lr else "recipe": r for lr, r in finals.items()},
            "flywheel_final_reward": fly_final["reward"],
            "trl_gain": gain(base, trl_final),
            "flywheel_gain": gain(base, fly_final),
            "flywheel_over_trl": gain(trl_final, fly_final),
        }
        if target <= base["reward"]:
            row["note"] = "TRL did not improve on the base model within the budget: no time to compare"
        else:
            row["trl_s"] = time_to(curve["trl"], target)
            row["flywheel_s"] = time_to(curve["flywheel"], target)
            if row["flywheel_s"] is None:
                row["note"] = "the flywheel never reached TRL's final reward"
            else:
                row["ratio"] = round(row["flywheel_s"] / row["trl_s"], 3)
                row["target_met"] = row["ratio"] <= 1 / 3
        out.append(row)
    return out


def describe(d: dict | None) -> str:
    if d is None:
        return "(no per-task rewards)"
    verdict = "" if d["resolvable"] else ", no resolvable difference"
    return f"{100 * d['diff']:+.1f} points [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}], n={d['n']}{verdict}"


def table(bench, evaluated: list[dict], summary: list[dict]) -> str:
    base = next(p for p in evaluated if p["side"] == "base")
    levels = ", ".join(map(str, bench.levels))
    head = (f"Held-out mean reward (greedy, {base['eval_tasks']} tasks: {', '.join(bench.domains)} "
            f"level {levels}) against training wall time, budget {bench.minutes:g} min per side; "
            f"base model {base['reward']:.3f}")  # fmt: skip
    lines = [head, ""]
    for row in summary:
        round_ = row["round"]
        best = trl_curves(evaluated, round_)[row["trl_best_lr"]]
        curves = {
            "trl": best,
            "flywheel": [p for p in evaluated if p["side"] == "flywheel" and p["round"] == round_],
        }
        sweep = ", ".join(f"{lr}: {r:.3f}" for lr, r in row["trl_finals"].items())
        order = " first, then ".join(bench.side_order(round_))
        lines += [f"Round {round_} ({order}); TRL's final reward by learning rate: {sweep}; its best below", "",
                  "| # | TRL policy | min | reward | flywheel policy | min | reward |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for i in range(max(len(c) for c in curves.values())):
            cells = []
            for s in SIDES:
                p = curves[s][i] if i < len(curves[s]) else None
                cells += [p["label"], f"{p['t'] / 60:.1f}", f"{p['reward']:.3f}"] if p else ["", "", ""]
            lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
        lines += ["", "Final policies, paired over the same held-out tasks (bootstrap 95%):", "",
                  f"- TRL's best over the base model: {describe(row['trl_gain'])}",
                  f"- the flywheel over the base model: {describe(row['flywheel_gain'])}",
                  f"- the flywheel over TRL's best: {describe(row['flywheel_over_trl'])}", ""]  # fmt: skip
    for row in summary:
        if "ratio" in row:
            verdict = "met" if row["target_met"] else "not met"
            trl_min, ours_min = row["trl_s"] / 60, row["flywheel_s"] / 60
            lines.append(f"Round {row['round']}: TRL's final reward {row['trl_final_reward']:.3f}: TRL got "
                         f"there at {trl_min:.1f} min, the flywheel at {ours_min:.1f} min; "
                         f"ratio {row['ratio']:.2f} (target <= 0.33: {verdict})")  # fmt: skip
        else:
            finals = (f"TRL final {row['trl_final_reward']:.3f}, "
                      f"flywheel final {row['flywheel_final_reward']:.3f}, base {row['base_reward']:.3f}")  # fmt: skip
            lines.append(f"Round {row['round']}: {row['note']} ({finals})")
    return "\n".join(lines) + "\n"


def plot(bench, evaluated: list[dict], summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = next(p for p in evaluated if p["side"] == "base")
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = {"trl": "tab:orange", "flywheel": "tab:blue"}
    names = {"trl": "TRL GRPOTrainer", "flywheel": "flywheel"}
    for row in summary:
        round_ = row["round"]
        arms = trl_curves(evaluated, round_)
        curves = [
            ("flywheel", None, [p for p in evaluated if p["side"] == "flywheel" and p["round"] == round_])
        ]
        curves += [("trl", lr, arm) for lr, arm in arms.items()]
        for side, lr, points in curves:
            curve = [base] + points
            label = names[side] + (f" lr {lr:g}" if lr and len(arms) > 1 else "")
            label += f" (round {round_})" if bench.rounds > 1 else ""
            minutes, rewards = [p["t"] / 60 for p in curve], [p["reward"] for p in curve]
            style = "-" if round_ % 2 == 0 else "--"
            faint = side == "trl" and lr != row["trl_best_lr"]
            ax.plot(minutes, rewards, marker="o", color=colors[side], linestyle=style, label=label,
                    alpha=0.35 if faint else 1.0)  # fmt: skip
    for row in summary:
        ax.axhline(row["trl_final_reward"], color="gray", linewidth=0.8, linestyle=":")
    ax.axvline(bench.minutes, color="black", linewidth=0.8, linestyle=":", label="budget")
    ax.set_xlabel("training wall time (min; evaluation excluded)")
    ax.set_ylabel("held-out mean reward (greedy)")
    ax.set_title(f"{', '.join(bench.domains)} L{','.join(map(str, bench.levels))}: time to reward")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
