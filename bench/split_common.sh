# Shared by bench/split_budget.sh and bench/split_rl_arm.sh (sourced, not run): the
# recipe, the lake and results dir of a split named NAME, and the helpers that log each
# step's wall time and append paired comparisons.
set -euo pipefail
cd "$(dirname "$0")/.."
FW=${FW:-.venv/bin/flywheel}
CFG=recipes/cpu-30min-proof.yaml
NAME=${NAME:-split}
LEVELS=${LEVELS:-[1]}
LAKE=runs/$NAME/lake
SFT20=runs/$NAME/sft20
OUT=${OUT:-bench/results/$NAME-$(date -u +%Y-%m-%d)}
LAST_MINUTES=${LAST_MINUTES:-10}
mkdir -p "$OUT" "runs/$NAME"
C=(--config "$CFG" --set "store.uri=$LAKE" --set "sampler.levels=$LEVELS")
# SEED: the run's seed (which reference tasks SFT takes, their order, the GRPO arm's samples
# and draws); the evaluation's tasks are the same for every seed (flows/evaluate.py's EVAL_SEED)
if [ -n "${SEED:-}" ]; then C+=(--set "seed=$SEED"); fi
# SFT_DOMAINS: the domains the SFT steps take reference replies from (default: the recipe's).
# A domain of the recipe left out of it stands for one that ships a verifier and no
# reference replies: GRPO may train on it, SFT has nothing to copy. Every evaluation and the
# GRPO arm keep the recipe's domains.
SFT_C=("${C[@]}")
if [ -n "${SFT_DOMAINS:-}" ]; then SFT_C+=(--set "sampler.domains=$SFT_DOMAINS"); fi
# the GRPO arm: no cold start of its own, 10 minutes at 5e-6, the thompson curriculum
RL_ARGS=(--set cold_start.references=0 --set "max_wall_minutes=$LAST_MINUTES"
  --set trainer.learning_rate=5e-6 --set curriculum.strategy=thompson)
# RL_SET: `key=value` settings that change the GRPO arm ("sampler.domains=[code]
# trainer.learning_rate=1e-5": GRPO only where SFT had no references); read, not a bare
# expansion, so that "[code]" does not glob. `trainer.kl_coef=0.1` holds the arm near the
# shared start: in split_budget.sh its run's pinned SFT policy, in split_rl_arm.sh its
# model.path (before 36b9215 split_budget.sh's arm was held to the base model instead)
read -ra KVS <<< "${RL_SET:-}"
for kv in "${KVS[@]}"; do RL_ARGS+=(--set "$kv"); done
step() {
  echo "== $(date -u +%H:%M:%S) $(git rev-parse --short HEAD) $*" | tee -a "$OUT/steps.log"
  /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"
}
# paired comparison appended to $OUT/$1: compare_into FILE --run-id A --a V --other-run B --b W
compare_into() { local file=$1; shift; $FW compare --store "$LAKE" "$@" >> "$OUT/$file"; }
strip_paths() { sed -i "s|$PWD/||g" "$OUT"/*.txt; }  # results name no machine's paths
