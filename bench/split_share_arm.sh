#!/usr/bin/env bash
# The GRPO arm of bench/split_budget.sh again, once the update shares each group's prompt
# (trainer.share_prompt, on by default on CPU): the same start (the shared SFT policy,
# exported to runs/<NAME>/sft20), the same sampler prior (that policy's evaluation, made
# again here as the new run's version 0), the same 10 minutes, in the same lake, so it
# pairs with the arms already there. Run after split_budget.sh with the same NAME/LEVELS.
#   NAME=split-l123 LEVELS="[1, 2, 3]" bash bench/split_share_arm.sh    # ~35 min
set -euo pipefail
cd "$(dirname "$0")/.."
FW=${FW:-.venv/bin/flywheel}
CFG=recipes/cpu-30min-proof.yaml
NAME=${NAME:-split}
LEVELS=${LEVELS:-[1]}
LAKE=runs/$NAME/lake
RUN=$NAME-rls
OUT=${OUT:-bench/results/$NAME-$(date -u +%Y-%m-%d)}
LAST_MINUTES=${LAST_MINUTES:-10}
mkdir -p "$OUT"
step() {
  echo "== $(date -u +%H:%M:%S) $(git rev-parse --short HEAD) $*" | tee -a "$OUT/steps.log"
  /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"
}
C=(--config "$CFG" --set "store.uri=$LAKE" --set "sampler.levels=$LEVELS" --set "model.path=runs/$NAME/sft20")
step $FW eval "${C[@]}" --run-id $RUN                    > "$OUT/eval-share-start.txt"
step $FW run "${C[@]}" --run-id $RUN --set cold_start.references=0 --set trainer.share_prompt=true \
  --set "max_wall_minutes=$LAST_MINUTES" --set trainer.learning_rate=5e-6 \
  --set curriculum.strategy=thompson                     > "$OUT/rl-share-arm.txt"
cp runs/$RUN/cycles.jsonl "$OUT/rl-share-cycles.jsonl"
step $FW eval "${C[@]}" --run-id $RUN                    > "$OUT/eval-rl-share-arm.txt"
cmp() { $FW compare --store "$LAKE" "$@" >> "$OUT/compare-share.txt"; }
cmp --run-id $NAME-sft --a current --other-run $RUN --b current
cmp --run-id $NAME-rl --a 1 --other-run $RUN --b current
cmp --run-id $NAME-rl --a current --other-run $RUN --b current
sed -i "s|$PWD/||g" "$OUT"/*.txt
