"""bench/vs_trl.py's report: time to TRL's final reward per side, the table and the plot."""

from __future__ import annotations

from pathlib import Path

SIDES = ("trl", "flywheel")

# ---- report -----------------------------------------------------------------------------------


def time_to(points: list[dict], target: float) -> float | None:
    """The wall time of the first point whose held-out reward reaches `target`."""
    return next((p["t"] for p in points if p["reward"] >= target - 1e-9), None)


def summarise(bench, evaluated: list[dict]) -> list[dict]:
    """Per round: TRL's final reward, the time each side needed to reach it, the ratio."""
    base = next(p for p in evaluated if p["side"] == "base")
    out = []
    for round_ in range(bench.rounds):
        curve = {s: [base] + [p for p in evaluated if p["side"] == s and p["round"] == round_] for s in SIDES}
        target = curve["trl"][-1]["reward"]
        row = {"round": round_, "order": "-".join(bench.side_order(round_)), "base_reward": base["reward"],
               "trl_final_reward": target, "flywheel_final_reward": curve["flywheel"][-1]["reward"]}
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


def table(bench, evaluated: list[dict], summary: list[dict]) -> str:
    base = next(p for p in evaluated if p["side"] == "base")
    levels = ", ".join(map(str, bench.levels))
    head = (f"Held-out mean reward (greedy, {base['eval_tasks']} tasks: {', '.join(bench.domains)} "
            f"level {levels}) against training wall time, budget {bench.minutes:g} min per side; "
            f"base model {base['reward']:.3f}")
    lines = [head, ""]
    for round_ in range(bench.rounds):
        curves = {s: [p for p in evaluated if p["side"] == s and p["round"] == round_] for s in SIDES}
        lines += [f"Round {round_} ({' first, then '.join(bench.side_order(round_))})", "",
                  "| # | TRL policy | min | reward | flywheel policy | min | reward |",
                  "|---|---|---|---|---|---|---|"]
        for i in range(max(len(c) for c in curves.values())):
            cells = []
            for s in SIDES:
                p = curves[s][i] if i < len(curves[s]) else None
                cells += [p["label"], f"{p['t'] / 60:.1f}", f"{p['reward']:.3f}"] if p else ["", "", ""]
            lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
        lines.append("")
    for row in summary:
        if "ratio" in row:
            verdict = "met" if row["target_met"] else "not met"
            trl_min, ours_min = row["trl_s"] / 60, row["flywheel_s"] / 60
            lines.append(f"Round {row['round']}: TRL's final reward {row['trl_final_reward']:.3f}: TRL got "
                         f"there at {trl_min:.1f} min, the flywheel at {ours_min:.1f} min; "
                         f"ratio {row['ratio']:.2f} (target <= 0.33: {verdict})")  # fmt: skip
        else:
            finals = (f"TRL final {row['trl_final_reward']:.3f}, "
                      f"flywheel final {row['flywheel_final_reward']:.3f}, base {row['base_reward']:.3f}")
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
    for round_ in range(bench.rounds):
        for side in SIDES:
            curve = [base] + [p for p in evaluated if p["side"] == side and p["round"] == round_]
            label = names[side] + (f" (round {round_})" if bench.rounds > 1 else "")
            minutes, rewards = [p["t"] / 60 for p in curve], [p["reward"] for p in curve]
            style = "-" if round_ % 2 == 0 else "--"
            ax.plot(minutes, rewards, marker="o", color=colors[side], linestyle=style, label=label)
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


