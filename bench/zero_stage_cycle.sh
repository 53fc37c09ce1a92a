#!/usr/bin/env bash
# Issue 44, item 2: the README's first run (recipes/first-run.yaml: an SFT cold start, then
# GRPO cycles of 8 tasks x 8) at trainer.zero_stage 3 (the default) and 0, one run after the
# other on one lake, without the before/after evaluations, so the wall time is the cold start's
# and the cycles'. Each run's cycles.jsonl holds its stage times; bench/cycle_table.py prints
# them side by side. The arms alternate ROUNDS times (the machine's speed moves).
#   bash bench/zero_stage_cycle.sh            # CYCLES=3 ROUNDS=1: ~9 min on the 2-core VM
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
CYCLES=${CYCLES:-3}
ROUNDS=${ROUNDS:-1}
FIRST=${FIRST:-1}  # the first round's number: FIRST=2 adds a round to an earlier run's
DIR=runs/zero-stage-cycle
OUT=bench/results/zero-stage-cycle-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
ids=()
for r in $(seq "$FIRST" $((FIRST + ROUNDS - 1))); do
  for stage in 3 0; do
    id=zsc-r$r-stage$stage
    step $FW run --config recipes/first-run.yaml --set "store.uri=$DIR/lake" --run-id $id --set cycles=$CYCLES \
      --set eval.before_and_after=false --set eval.base_before_cold_start=false \
      --set trainer.zero_stage=$stage                                                  > "$OUT/$id.txt"
    cp runs/$id/cycles.jsonl "$OUT/$id-cycles.jsonl"
    ids+=("$id")
  done
done
.venv/bin/python bench/cycle_table.py --store "$DIR/lake" "${ids[@]}" | tee "$OUT/cycle_table.txt"
sed -i "s|$PWD/||g" "$OUT"/*.txt
