#!/usr/bin/env bash
# Issue 21, item 1: bf16 rollouts (the engine in bfloat16, the trainer in float32, the
# mismatch corrected by truncated importance sampling) against float32 rollouts: held-out
# learning at equal wall time. Both arms start from ONE SFT policy (recipe 3's cold start,
# run once and exported), so the comparison is of the RL cycles alone, then run GRPO with
# recipe 3's knobs for MINUTES of wall time each (the starting evaluation included). One
# lake, so that every comparison pairs the same held-out tasks (24 per domain, 96 in all).
# Each arm's cycles.jsonl holds its stage times (the cycle table of bench/README.md).
# WHAT=trainer (issue 44) compares the trainer instead: trainer.bf16 false against true
# (autocast over float32 master weights), the engine's dtype the default in both, in its own
# lake and SFT start.
# Runs one step after another (2 cores: never two at once).
#   bash bench/dtype_vs.sh               # MINUTES=15: ~45 min on the 2-core VM
#   WHAT=trainer bash bench/dtype_vs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
MINUTES=${MINUTES:-15}
CFG=recipes/cpu-30min-all-l1.yaml
WHAT=${WHAT:-engine}
case "$WHAT" in
  engine) ID=dtv; KNOB=engine.dtype; FP32=float32; BF16=bfloat16; DIR=runs/dtype-vs ;;
  trainer) ID=tdv; KNOB=trainer.bf16; FP32=false; BF16=true; DIR=runs/trainer-dtype-vs ;;
  *) echo "WHAT must be engine or trainer, not $WHAT" >&2; exit 2 ;;
esac
LAKE=$DIR/lake
OUT=bench/results/${DIR#runs/}-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
if [ ! -d "$DIR/sft" ]; then
  step $FW sft --config $CFG --set "store.uri=$LAKE" --run-id $ID-sft --references 32 --epochs 2 \
    --learning-rate 5e-5 --set trainer.bf16=false                                     > "$OUT/sft.txt"
  $FW export --run-id $ID-sft --version current --to "$DIR/sft" --store "$LAKE"
fi
[ -n "${SFT_ONLY:-}" ] && exit 0  # bench/rl_lr.sh starts its arms from the same SFT policy
common=(--config $CFG --model "$DIR/sft" --set "store.uri=$LAKE" --set cold_start.references=0
        --set "max_wall_minutes=$MINUTES" --set cycles=100 --set eval.in_run_tasks_per_level=24)
step $FW run "${common[@]}" --run-id $ID-fp32 --set $KNOB=$FP32                      > "$OUT/fp32.txt"
step $FW run "${common[@]}" --run-id $ID-bf16 --set $KNOB=$BF16                      > "$OUT/bf16.txt"
cp runs/$ID-fp32/cycles.jsonl "$OUT/fp32-cycles.jsonl"
cp runs/$ID-bf16/cycles.jsonl "$OUT/bf16-cycles.jsonl"
cmp() { $FW compare --store "$LAKE" "$@" >> "$OUT/compare.txt"; }
cmp --run-id $ID-fp32 --a current --other-run $ID-bf16 --b current   # the claim: bf16 - fp32, final policies
cmp --run-id $ID-fp32 --a 0 --b current                              # RL's part, each arm
cmp --run-id $ID-bf16 --a 0 --b current
sed -i "s|$PWD/||g" "$OUT"/*.txt
