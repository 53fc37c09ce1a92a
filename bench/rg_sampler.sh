#!/usr/bin/env bash
# Issue 18: the share of zero-variance groups per cycle, the curriculum (with the starting
# evaluation's prior; proportional, then thompson) against uniform round-robin over the same
# rg domains at equal training compute (same cycles, tasks per cycle, k, tokens; the
# recipe's wall cap off), one after the other (2 cores: never two at once); the thompson arm
# (with the recipe's curriculum.max_arm_share) starts from the proportional arm's SFT policy
# (v1) instead of making it again; then every arm's zero-variance share, as a ratio of
# uniform's, and its breadth (bench/zero_variance.py), and the before/after tables.
#   bash bench/rg_sampler.sh [CYCLES [REFERENCES [PER_LEVEL]]]   # 13 1 2: ~1.6 h on the 2-core VM
# REFERENCES > 0: both arms start with the SFT cold start on that many of the generators'
# answers per domain and level (SmolLM2 writes no <answer> tags without it); PER_LEVEL: the
# curriculum arm's before/after evaluation size per domain and level; LEVELS (env): the
# sampler's levels, [1, 2] unless set.
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
CFG=recipes/cpu-rg-mix.yaml
CYCLES=${1:-4}
REFS=${2:-0}
PER_LEVEL=${3:-2}
OUT=bench/results/rg-sampler-$(date -u +%Y-%m-%d)-sft$REFS
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
EVAL=(--set eval.in_run_tasks_per_level="$PER_LEVEL" --set eval.suite_tasks_per_level="$PER_LEVEL" --set eval.in_run_suites=true)
COLD=(--set cold_start.references="$REFS" --set cold_start.epochs=1 --set "sampler.levels=${LEVELS:-[1, 2]}"
      --set max_wall_minutes=0)
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id "rg-curriculum-sft$REFS" --set eval.before_and_after=true \
  --set curriculum.strategy=proportional --set curriculum.window_cycles=3 "${EVAL[@]}" "${COLD[@]}" > "$OUT/curriculum.txt"
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id "rg-uniform-sft$REFS" --set curriculum.enabled=false "${COLD[@]}" \
  > "$OUT/uniform.txt"
V1=runs/rg-curriculum-sft$REFS/lake/policies/run=rg-curriculum-sft$REFS/v1/hf
START=(--set cold_start.references=0 --set "sampler.levels=${LEVELS:-[1, 2]}" --set max_wall_minutes=0)
[ "$REFS" -gt 0 ] && START+=(--model "$V1")
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id "rg-thompson-sft$REFS" --set eval.before_and_after=true \
  --set curriculum.strategy=thompson --set "curriculum.window_cycles=$CYCLES" "${EVAL[@]}" "${START[@]}" > "$OUT/thompson.txt"
ARMS=("rg-uniform-sft$REFS" "rg-curriculum-sft$REFS" "rg-thompson-sft$REFS")
for r in "${ARMS[@]}"; do cp "runs/$r/cycles.jsonl" "$OUT/$r-cycles.jsonl"; done
.venv/bin/python bench/zero_variance.py --cycles "$CYCLES" "${ARMS[@]}" | tee "$OUT/zero-variance.md"
$FW compare --run-id "rg-curriculum-sft$REFS" --a "$([ "$REFS" -gt 0 ] && echo 1 || echo 0)" --b current > "$OUT/compare.txt"
$FW compare --run-id "rg-thompson-sft$REFS" --a 0 --b current >> "$OUT/compare.txt"
cp "runs/rg-thompson-sft$REFS/domains.png" "$OUT/" 2>/dev/null || true
sed -i "s|$PWD/||g" "$OUT"/*.txt
