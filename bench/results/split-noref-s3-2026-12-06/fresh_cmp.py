"""Seed 3's SFT-only -> KL arm, paired, on the held-out tasks of fresh.sh's evaluation: all
of them, and only those the split's evaluations never saw (per domain too)."""

from flywheel.reports.eval_report import task_scores
from flywheel.reports.stats import paired
from flywheel.storage import evals
from flywheel.storage.lake import Lake

SUITES = ("humaneval", "code_transfer")


def scores(uri: str, run: str, version: int) -> dict:
    return task_scores(evals.connect(Lake(uri), run), version)


seen = {t for t, (d, _, _) in scores("runs/split-noref-s3/lake", "split-noref-s3-sft", 1).items() if d not in SUITES}
a = scores("runs/split-noref-s3-fresh/lake", "split-noref-s3-sft", 1)
b = scores("runs/split-noref-s3-fresh/lake", "split-noref-s3-code2e5kl", 10)
print("held-out tasks of the split's evaluations:", len(seen), "of them in this one:", len(seen & set(a)))
for name, keep in (("all 96/level", lambda t: True), ("fresh only", lambda t: t not in seen)):
    ids = [t for t in a if t in b and keep(t)]
    cells = {t: a[t][0] for t in ids}
    p = paired({t: a[t][2] for t in ids}, {t: b[t][2] for t in ids}, cells)
    print(f"{name}: n={len(ids)} SFT-only {p.mean_a:.3f} -> RL {p.mean_b:.3f}: {p.describe()}")
    for domain in sorted(set(cells.values())):
        mine = [t for t in ids if cells[t] == domain]
        ka, kb = sum(a[t][2] for t in mine), sum(b[t][2] for t in mine)
        pd = paired({t: a[t][2] for t in mine}, {t: b[t][2] for t in mine})
        print(f"   {domain}: n={len(mine)} {ka}/{len(mine)} -> {kb}/{len(mine)}: {pd.describe()}")
