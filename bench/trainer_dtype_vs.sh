#!/usr/bin/env bash
# Issue 44, item 1: the trainer in bf16 (autocast over float32 master weights) against the
# trainer in float32: held-out learning at equal wall time, on CPU. Like bench/dtype_vs.sh
# (which compared rollout dtypes): both arms start from ONE SFT policy (recipe 3's cold
# start, run once and exported), then run GRPO with recipe 3's knobs for MINUTES of wall
# time each (the starting evaluation included), in one lake, so every comparison pairs the
# same held-out tasks (24 per domain, 96 in all). Only trainer.bf16 differs; the engine's
# dtype is the default in both. Each arm's cycles.jsonl holds its stage times.
# Runs one step after another (2 cores: never two at once).
#   bash bench/trainer_dtype_vs.sh        # MINUTES=15: ~45 min on the 2-core VM
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
MINUTES=${MINUTES:-15}
CFG=recipes/cpu-30min-all-l1.yaml
DIR=runs/trainer-dtype-vs
LAKE=$DIR/lake
OUT=bench/results/trainer-dtype-vs-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
if [ ! -d "$DIR/sft" ]; then
  step $FW sft --config $CFG --set "store.uri=$LAKE" --run-id tdv-sft --references 32 --epochs 2 \
    --learning-rate 5e-5 --set trainer.bf16=false                                      > "$OUT/sft.txt"
  $FW export --run-id tdv-sft --version current --to "$DIR/sft" --store "$LAKE"
fi
common=(--config $CFG --model "$DIR/sft" --set "store.uri=$LAKE" --set cold_start.references=0
        --set "max_wall_minutes=$MINUTES" --set cycles=100 --set eval.in_run_tasks_per_level=24)
step $FW run "${common[@]}" --run-id tdv-fp32 --set trainer.bf16=false                > "$OUT/fp32.txt"
step $FW run "${common[@]}" --run-id tdv-bf16 --set trainer.bf16=true                 > "$OUT/bf16.txt"
cp runs/tdv-fp32/cycles.jsonl "$OUT/fp32-cycles.jsonl"
cp runs/tdv-bf16/cycles.jsonl "$OUT/bf16-cycles.jsonl"
cmp() { $FW compare --store "$LAKE" "$@" >> "$OUT/compare.txt"; }
cmp --run-id tdv-fp32 --a current --other-run tdv-bf16 --b current   # the claim: bf16 - fp32, final policies
cmp --run-id tdv-fp32 --a 0 --b current                              # RL's part, each arm
cmp --run-id tdv-bf16 --a 0 --b current
sed -i "s|$PWD/||g" "$OUT"/*.txt
