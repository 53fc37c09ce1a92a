#!/usr/bin/env bash
# Issue 17, item 4: the replay ablation at several seeds a side. Recipe 2 (extraction and
# code at level 1, from the base model: where GRPO learns within minutes on the 2-core
# CPU), CYCLES cycles each, failure replay on and off at each seed (same seed: the same
# first tasks), every run in one lake so all evaluations pair the same held-out tasks
# (PER_LEVEL a domain, greedy, before and after). Runs one after another (2 cores), skips
# a run already finished (so a killed script picks up where it stopped;
# a resumed run appends to its console file), then compares
# the sides with an interval over seeds and tasks (bench/seeds_compare.py).
#   bash bench/replay_seeds.sh                      # 3 seeds x 2 arms x 6 cycles, ~2.5 h here
#   SEEDS="1 2 3 4" CYCLES=8 bash bench/replay_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
CYCLES=${CYCLES:-6}
SEEDS=${SEEDS:-1 2 3}
PER_LEVEL=${PER_LEVEL:-40}
LAKE=runs/replay-seeds/lake
OUT=bench/results/replay-seeds-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
for S in $SEEDS; do
  for ARM in on off; do
    ID=replay-$ARM-s$S
    if [ -f "runs/$ID/cycles.jsonl" ] && [ "$(wc -l < "runs/$ID/cycles.jsonl")" -ge "$CYCLES" ]; then continue; fi
    echo "== $(date -u +%H:%M:%S) $ID" | tee -a "$OUT/steps.log"
    /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" \
      $FW run --config recipes/cpu-30min-l1.yaml --run-id "$ID" --set "store.uri=$LAKE" --set "seed=$S" \
      --set "cycles=$CYCLES" --set "replay.enabled=$([ "$ARM" = on ] && echo true || echo false)" \
      --set eval.before_and_after=true --set "eval.in_run_tasks_per_level=$PER_LEVEL" >> "$OUT/$ID.txt"
    cp "runs/$ID/cycles.jsonl" "$OUT/$ID-cycles.jsonl"
  done
done
ids() { local out=""; for S in $SEEDS; do out+="${out:+,}replay-$1-s$S"; done; echo "$out"; }
.venv/bin/python bench/seeds_compare.py --store "$LAKE" --a "$(ids off)" --b "$(ids on)" \
  --names "replay off,replay on" --png "$OUT/replay.png" | tee "$OUT/compare.md"
sed -i "s|$PWD/||g" "$OUT"/*.txt
