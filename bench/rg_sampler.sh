#!/usr/bin/env bash
# Issue 18: the share of zero-variance groups per cycle, the curriculum (with the starting
# evaluation's prior) against uniform round-robin over the same rg domains at equal
# training compute (same cycles, tasks per cycle, k, tokens), one after the other (2 cores:
# never two at once); then each run's groups and the curriculum run's before/after table.
#   bash bench/rg_sampler.sh [CYCLES]        # ~35 min on the 2-core VM at 4 cycles
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
CFG=recipes/cpu-rg-mix.yaml
CYCLES=${1:-4}
OUT=bench/results/rg-sampler-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
EVAL=(--set eval.in_run_tasks_per_level=2 --set eval.suite_tasks_per_level=2 --set eval.in_run_suites=true)
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id rg-curriculum --set eval.before_and_after=true "${EVAL[@]}" \
  > "$OUT/curriculum.txt"
step $FW run --config "$CFG" --cycles "$CYCLES" --run-id rg-uniform --set curriculum.enabled=false \
  > "$OUT/uniform.txt"
for r in rg-curriculum rg-uniform; do
  $FW report --run-id "$r" --by cycle > "$OUT/$r-cycles.txt"
  $FW query --run-id "$r" "SELECT cycle, count(*) AS groups, sum(1 - informative) AS zero_variance,
    count(DISTINCT domain) AS domains FROM groups GROUP BY cycle ORDER BY cycle" > "$OUT/$r-groups.txt"
  cp "runs/$r/cycles.jsonl" "$OUT/$r-cycles.jsonl"
done
cp runs/rg-curriculum/domains.png "$OUT/" 2>/dev/null || true
