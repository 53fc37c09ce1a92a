#!/usr/bin/env bash
# Issue 20: LoRA against full fine-tuning, held-out learning at equal wall time. Both arms run
# recipes/cpu-lora.yaml (SFT cold start, then GRPO) for MINUTES of wall time, the cold start
# included: one trains rank-16 adapters at its learning rates, the other every weight at the
# full fine-tune's (recipe 3's: SFT 5e-5, GRPO 2e-5). One lake, so that the comparisons pair
# the same held-out tasks (each run evaluates its cold-start policy and its last one on 24
# tasks per domain). Runs one after the other (2 cores: never two at once).
#   bash bench/lora_vs_full.sh        # MINUTES=15: ~40 min on the 2-core VM
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
MINUTES=${MINUTES:-15}
LAKE=runs/lora-vs-full/lake
OUT=bench/results/lora-vs-full-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
common=(--config recipes/cpu-lora.yaml --set "store.uri=$LAKE" --set "max_wall_minutes=$MINUTES" --set cycles=100)
step $FW run "${common[@]}" --run-id lvf-lora                                          > "$OUT/lora.txt"
step $FW run "${common[@]}" --run-id lvf-full --set trainer.lora=null \
  --set cold_start.learning_rate=5e-5 --set trainer.learning_rate=2e-5                 > "$OUT/full.txt"
cp runs/lvf-lora/cycles.jsonl "$OUT/lora-cycles.jsonl"
cp runs/lvf-full/cycles.jsonl "$OUT/full-cycles.jsonl"
cmp() { $FW compare --store "$LAKE" "$@" >> "$OUT/compare.txt"; }
cmp --run-id lvf-full --a current --other-run lvf-lora --b current   # the claim: LoRA - full, final policies
cmp --run-id lvf-full --a 1 --other-run lvf-lora --b 1               # after the cold starts
cmp --run-id lvf-lora --a 1 --b current                              # RL's part, each arm
cmp --run-id lvf-full --a 1 --b current
sed -i "s|$PWD/||g" "$OUT"/*.txt
