#!/usr/bin/env bash
# Issue 17, item 4: GRPO's learning rate after an SFT cold start. Each arm starts from the
# SFT policy of bench/dtype_vs.sh (recipe 3's cold start, exported once; made here if it is
# missing) and runs GRPO with recipe 3's knobs, the engine in float32, for MINUTES of wall
# time (the starting evaluation included), at the learning rate given; one lake with the
# dtype-vs arms, so every comparison pairs the same 96 held-out tasks (dtype_vs.sh's
# float32 arm is the 2e-5 arm). Runs one arm after another (2 cores: never two at once).
#   bash bench/rl_lr.sh 5e-6              # one 15-minute arm, ~20 min on the 2-core VM
#   MINUTES=30 bash bench/rl_lr.sh 5e-6   # a 30-minute one
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
MINUTES=${MINUTES:-15}
DIR=runs/dtype-vs
LAKE=$DIR/lake
OUT=bench/results/rl-lr-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
[ -d "$DIR/sft" ] || SFT_ONLY=1 bash bench/dtype_vs.sh
for LR in "$@"; do
  ID="rl-lr$LR-${MINUTES}m"
  echo "== $(date -u +%H:%M:%S) $ID" | tee -a "$OUT/steps.log"
  $FW run --config recipes/cpu-30min-all-l1.yaml --model "$DIR/sft" --set "store.uri=$LAKE" \
    --set cold_start.references=0 --set "max_wall_minutes=$MINUTES" --set cycles=100 \
    --set eval.in_run_tasks_per_level=24 --set engine.dtype=float32 \
    --set "trainer.learning_rate=$LR" --run-id "$ID"                                  > "$OUT/$ID.txt"
  cp "runs/$ID/cycles.jsonl" "$OUT/$ID-cycles.jsonl"
  $FW compare --store "$LAKE" --run-id "$ID" --a 0 --b current                        >> "$OUT/compare.txt"
  $FW compare --store "$LAKE" --run-id dtv-fp32 --a current --other-run "$ID" --b current >> "$OUT/compare.txt"
done
sed -i "s|$PWD/||g" "$OUT"/*.txt
