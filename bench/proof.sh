#!/usr/bin/env bash
# Issue 17, item 4: base vs SFT-only vs SFT then RL at equal wall time (recipes/cpu-30min-proof.yaml),
# each policy evaluated on the held-out cells, code_transfer and HumanEval, in one lake so that
# every comparison pairs the same tasks. Runs one step after another (2 cores: never two at once);
# a step whose output is in the lake is skipped on a re-run. Results: bench/results/proof-<date>/.
#   bash bench/proof.sh            # ~2 h on the 2-core VM
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
CFG=recipes/cpu-30min-proof.yaml
OUT=bench/results/proof-$(date -u +%Y-%m-%d)
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }

step $FW eval --config "$CFG" --run-id proof-base                                     > "$OUT/eval-base.txt"
step $FW sft --config "$CFG" --run-id proof-sft --references 64 --epochs 20 --learning-rate 5e-5 \
  --max-minutes 30                                                                     > "$OUT/sft.txt"
step $FW eval --config "$CFG" --run-id proof-sft                                      > "$OUT/eval-sft30.txt"
step $FW run --config "$CFG" --run-id proof-rl                                        > "$OUT/rl.txt"
step $FW eval --config "$CFG" --run-id proof-rl                                       > "$OUT/eval-rl-final.txt"
cp runs/proof-rl/cycles.jsonl "$OUT/rl-cycles.jsonl"
cmp() { $FW compare --store runs/proof/lake "$@" >> "$OUT/compare.txt"; }
cmp --run-id proof-base --a 0 --other-run proof-sft --b current
cmp --run-id proof-base --a 0 --other-run proof-rl --b current
cmp --run-id proof-sft --a current --other-run proof-rl --b current
# the RL run's own cold-start policy last: the split by stage, not the claim itself
step $FW eval --config "$CFG" --run-id proof-rl --version 1                           > "$OUT/eval-rl-v1-sft.txt"
cmp --run-id proof-base --a 0 --other-run proof-rl --b 1
cmp --run-id proof-rl --a 1 --b current
