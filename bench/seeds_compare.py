"""Two training recipes, each run at several seeds, compared on the same held-out tasks.

Each run's last evaluated policy (its `current` version, evaluated by
`eval.before_and_after`) is scored per task; the difference of the two sides' means comes
with an interval that resamples both the seeds and the tasks (`flywheel.reports.stats.seeds_paired`),
so one lucky seed cannot pass for a recipe's effect. Also each seed's own paired difference
(`paired`, tasks only) and each side's starting evaluation, which should be the same policy
on the same tasks.

    .venv/bin/python bench/seeds_compare.py --store runs/replay-seeds/lake \
        --a replay-off-s1,replay-off-s2,replay-off-s3 --b replay-on-s1,replay-on-s2,replay-on-s3

A run in another lake is named `run_id@lake` (the seeds of bench/split_budget.sh each have
their own lake, and the evaluation's tasks are the same in every one):

    .venv/bin/python bench/seeds_compare.py \
        --a split-noref-s2-sft@runs/split-noref-s2/lake,split-noref-s3-sft@runs/split-noref-s3/lake \
        --b split-noref-s2-rl@runs/split-noref-s2/lake,split-noref-s3-rl@runs/split-noref-s3/lake
"""

from __future__ import annotations

import argparse

from flywheel.cli.common import lake_and_store, run_config
from flywheel.reports.eval_report import task_scores
from flywheel.reports.stats import paired, seeds_paired, wilson
from flywheel.storage import evals


def final_scores(store: str | None, run_id: str) -> tuple[int, dict, dict, dict]:
    """(version, task -> solved at the run's current version, the same at v0, task -> group).
    `run_id@lake` reads that run from its own lake instead of `store`."""
    run_id, _, own_lake = run_id.partition("@")
    store = own_lake or store
    config = run_config(run_id, "runs", store, None)
    lake, policies = lake_and_store(config)
    con = evals.connect(lake, run_id)
    version = policies.version
    groups = lake.evaluation_groups(run_id, version)
    group_of = {d: g for g, domains in groups.items() for d in domains}
    final, start = task_scores(con, version), task_scores(con, 0)
    return (
        version,
        {t: s for t, (_, _, s) in final.items()},
        {t: s for t, (_, _, s) in start.items()},
        {t: group_of.get(d, "other") for t, (d, _, _) in final.items()},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="the lake the runs wrote to (a run named run_id@lake: that lake)")
    ap.add_argument("--a", required=True, help="comma-separated run ids of side a (the baseline)")
    ap.add_argument("--b", required=True, help="comma-separated run ids of side b")
    ap.add_argument("--names", default="a,b", help="what to call the sides in the picture")
    ap.add_argument("--png", help="also draw each run's start and final pass@1 with intervals here")
    args = ap.parse_args()
    sides = {"a": args.a.split(","), "b": args.b.split(",")}
    got = {side: [final_scores(args.store, r) for r in runs] for side, runs in sides.items()}
    print("| side | run | version | v0 pass@1 | final pass@1 [95% Wilson] | n |")
    print("| --- | --- | --- | --- | --- | --- |")
    for side, runs in sides.items():
        for run_id, (version, final, start, _) in zip(runs, got[side]):
            lo, hi = wilson(sum(final.values()), len(final))
            v0 = f"{sum(start.values()) / len(start):.3f}" if start else "not evaluated"
            print(f"| {side} | {run_id} | v{version} | {v0} | "
                  f"{sum(final.values()) / len(final):.3f} [{lo:.3f}, {hi:.3f}] | {len(final)} |")  # fmt: skip
    print("\nEach seed, b - a, paired over the same tasks (tasks resampled):\n")
    for (ra, fa), (rb, fb) in zip(zip(sides["a"], got["a"]), zip(sides["b"], got["b"])):
        print(f"- {rb} - {ra}: {paired(fa[1], fb[1]).describe()}")
    groups = sorted({g for _, _, _, group_of in got["a"] + got["b"] for g in group_of.values()})
    print(f"\nb - a over {len(sides['a'])} and {len(sides['b'])} seeds (seeds and tasks resampled):\n")
    for group in ["all", *groups] if len(groups) > 1 else ["all"]:
        sides_of = {side: [pick(f, g, group) for _, f, _, g in got[side]] for side in got}
        p = seeds_paired(sides_of["a"], sides_of["b"])
        print(f"- {group}: a {p.mean_a:.3f}, b {p.mean_b:.3f}: {p.describe()}")
    if args.png:
        names = dict(zip(sides, args.names.split(",")))
        draw(args.png, {names[side]: list(zip(runs, got[side])) for side, runs in sides.items()})


def draw(path: str, sides: dict) -> None:
    """Each run as a line from its starting to its final pass@1, Wilson intervals as bars,
    the sides side by side: whether seeds agree is seen at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for i, (name, runs) in enumerate(sides.items()):
        for j, (run_id, (version, final, start, _)) in enumerate(runs):
            xs = [2 * i + j * 0.12, 2 * i + 1 + j * 0.12]
            ys, errs = [], [[], []]
            for scores in (start, final):
                k, n = sum(scores.values()), len(scores)
                lo, hi = wilson(k, n)
                ys.append(k / n)
                errs[0].append(k / n - lo)
                errs[1].append(hi - k / n)
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, color=f"C{i}",
                        label=name if j == 0 else None, alpha=0.8)  # fmt: skip
    mid = 0.06 * (max(len(runs) for runs in sides.values()) - 1)
    ax.set_xticks([2 * i + d + mid for i in range(len(sides)) for d in (0, 1)])
    ax.set_xticklabels([f"{name}\nv0" if d == 0 else f"{name}\nfinal" for name in sides for d in (0, 1)])
    ax.set_ylabel("held-out pass@1 (greedy)")
    ax.set_title("each seed: start -> final, 95% Wilson intervals")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def pick(scores: dict, group_of: dict, group: str) -> dict:
    return {t: s for t, s in scores.items() if group == "all" or group_of.get(t) == group}


if __name__ == "__main__":
    main()
