#!/usr/bin/env bash
# Issue 18: the share of zero-variance groups per cycle, the curriculum (with the starting
# evaluation's prior) against uniform round-robin over the same rg domains at equal
# training compute (same cycles, tasks per cycle, k, tokens), one after the other (2 cores:
# never two at once); then each run's groups and the curriculum run's before/after table.
#   bash bench/rg_sampler.sh [CYCLES [REFERENCES [PER_LEVEL]]]   # ~25 min at 4 cycles
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
COLD=(--set cold_start.references="$REFS" --set cold_start.epochs=1 --set "sampler.levels=${LEVELS:-[1, 2]}")
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id "rg-curriculum-sft$REFS" --set eval.before_and_after=true \
  "${EVAL[@]}" "${COLD[@]}" > "$OUT/curriculum.txt"
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id "rg-uniform-sft$REFS" --set curriculum.enabled=false "${COLD[@]}" \
  > "$OUT/uniform.txt"
for r in "rg-curriculum-sft$REFS" "rg-uniform-sft$REFS"; do
  $FW report --run-id "$r" --by cycle > "$OUT/$r-cycles.txt"
  $FW query --run-id "$r" "SELECT cycle, count(*) AS groups, sum(1 - informative) AS zero_variance,
    count(DISTINCT domain) AS domains FROM groups GROUP BY cycle ORDER BY cycle" > "$OUT/$r-groups.txt"
  cp "runs/$r/cycles.jsonl" "$OUT/$r-cycles.jsonl"
done
cp "runs/rg-curriculum-sft$REFS/domains.png" "$OUT/" 2>/dev/null || true
