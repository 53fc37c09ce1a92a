# Seed 3's SFT-only and KL arms on 96 held-out tasks a domain and level (the first 32 are
# the split's own; 64 more no evaluation had seen), in a lake of their own so the split's
# evaluations stay as they were: its policies hard-linked (read only), its manifests copied.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
OUT=bench/results/split-noref-s3-2026-12-06
SRC=runs/split-noref-s3/lake
LAKE=runs/split-noref-s3-fresh/lake
mkdir -p $LAKE/policies
cp -r $SRC/_policies $LAKE/
cp -al $SRC/policies/run=split-noref-s3-sft $SRC/policies/run=split-noref-s3-code2e5kl $LAKE/policies/
C=(--config recipes/cpu-30min-proof.yaml --set store.uri=$LAKE --set "sampler.levels=[1]" --set seed=3
  --set eval.tasks_per_level=96 --set "eval.suites=[]")
.venv/bin/flywheel eval "${C[@]}" --run-id split-noref-s3-sft > $OUT/eval-fresh-sft-arm.txt
.venv/bin/flywheel eval "${C[@]}" --set model.path=runs/split-noref-s3/sft20 --run-id split-noref-s3-code2e5kl \
  > $OUT/eval-fresh-code2e5kl-arm.txt
.venv/bin/python $OUT/fresh_cmp.py > $OUT/compare-fresh.txt
