"""Paired difference on the held-out tasks the earlier evaluations never saw."""
from flywheel.eval_report import task_scores
from flywheel.stats import paired, wilson
from storage import evals
from storage.lake import Lake

def scores(uri, run, version):
    return task_scores(evals.connect(Lake(uri), run), version)

old = scores("runs/split-noref-s3/lake", "split-noref-s3-sft", 1)
a = scores("runs/split-noref-s3-fresh/lake", "split-noref-s3-sft", 1)
b = scores("runs/split-noref-s3-fresh/lake", "split-noref-s3-code2e5kl", 10)
heldout_old = {t for t, (d, _, _) in old.items() if d not in ("humaneval", "code_transfer")}
print("old held-out tasks:", len(heldout_old), "of them in the new eval:", len(heldout_old & set(a)))
for name, keep in (("all 96/level", lambda t: True), ("fresh only", lambda t: t not in heldout_old)):
    ids = [t for t in a if t in b and keep(t)]
    sa = {t: a[t][2] for t in ids}; sb = {t: b[t][2] for t in ids}
    cells = {t: a[t][0] for t in ids}
    p = paired(sa, sb, cells)
    print(f"{name}: n={len(ids)} SFT-only {p.mean_a:.3f} -> RL {p.mean_b:.3f}: {p.describe()}")
    for d in sorted(set(cells.values())):
        di = [t for t in ids if cells[t] == d]
        ka, kb = sum(sa[t] for t in di), sum(sb[t] for t in di)
        pd = paired({t: sa[t] for t in di}, {t: sb[t] for t in di})
        print(f"   {d}: n={len(di)} {ka}/{len(di)} -> {kb}/{len(di)}: {pd.describe()}")
