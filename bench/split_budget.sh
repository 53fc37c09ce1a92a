#!/usr/bin/env bash
# Issue 17, item 4: the last 10 of 30 minutes, spent on more SFT or on GRPO. Both arms share
# 20 minutes of SFT (recipes/cpu-30min-proof.yaml's references, 64 a domain, 5e-5); from that
# policy one arm runs 10 more minutes of SFT, the other 10 minutes of GRPO at 5e-6 with the
# thompson curriculum, whose prior is the shared policy's evaluation (so it spends its samples
# on the arms SFT left unsaturated). Every policy is evaluated on the same held-out cells,
# code_transfer and HumanEval in one lake, so every comparison pairs the same tasks. Runs one
# step after another (2 cores: never two at once). Results: bench/results/<NAME>-<date>/.
#   bash bench/split_budget.sh     # ~1.5 h on the 2-core VM
#   NAME=split-l123 LEVELS="[1, 2, 3]" bash bench/split_budget.sh   # held-out cells SFT may not saturate
#   NAME=split-noref SFT_DOMAINS='[math, extraction, data, "file:examples/tasks/functions.jsonl"]' \
#     bash bench/split_budget.sh      # code with its tests and no reference replies
#   SEED=1 NAME=split-noref-s1 SFT_DOMAINS=... bash bench/split_budget.sh  # the same, another seed
#   SEED=2 NAME=split-noref-s2 SFT_DOMAINS=... RL_SET="sampler.domains=[code] trainer.learning_rate=2e-5" \
#     bash bench/split_budget.sh      # the GRPO arm on code only, at 2e-5
#   SEED=3 NAME=split-noref-s3 SFT_DOMAINS=... \
#     RL_SET="sampler.domains=[code] trainer.learning_rate=2e-5 trainer.kl_coef=0.1" bash bench/split_budget.sh
source "$(dirname "$0")/split_common.sh"
SFT_MINUTES=${SFT_MINUTES:-20}
made() { [ -f "$LAKE/_policies/run=$1/manifest.json" ]; }  # an SFT step already done: not again
SFT_ARGS=(--references 64 --epochs 20 --learning-rate 5e-5)
# the shared start: SFT, its evaluation (the GRPO arm's sampler prior), its export
made $NAME-rl || step $FW sft "${SFT_C[@]}" --run-id $NAME-rl "${SFT_ARGS[@]}" \
  --max-minutes "$SFT_MINUTES"                                                         > "$OUT/sft-shared.txt"
step $FW eval "${C[@]}" --run-id $NAME-rl --version 1   > "$OUT/eval-shared.txt"
[ -d "$SFT20" ] || step $FW export --run-id $NAME-rl --store "$LAKE" --version 1 --to "$SFT20" > "$OUT/export.txt"
# arm 1: more SFT, from the shared policy
made $NAME-sft || step $FW sft "${SFT_C[@]}" --set "model.path=$SFT20" --run-id $NAME-sft \
  "${SFT_ARGS[@]}" --max-minutes "$LAST_MINUTES"                                       > "$OUT/sft-arm.txt"
step $FW eval "${C[@]}" --run-id $NAME-sft              > "$OUT/eval-sft-arm.txt"
# arm 2: GRPO, resuming the shared run (its version 1)
step $FW run "${C[@]}" --run-id $NAME-rl "${RL_ARGS[@]}"  > "$OUT/rl-arm.txt"
cp runs/$NAME-rl/cycles.jsonl "$OUT/rl-cycles.jsonl"
step $FW eval "${C[@]}" --run-id $NAME-rl              > "$OUT/eval-rl-arm.txt"
compare_into compare.txt --run-id $NAME-sft --a current --other-run $NAME-rl --b current
compare_into compare.txt --run-id $NAME-rl --a 1 --other-run $NAME-sft --b current
compare_into compare.txt --run-id $NAME-rl --a 1 --b current
# the base model last: the reference for "no regression" on HumanEval and code_transfer
step $FW eval "${C[@]}" --run-id $NAME-base             > "$OUT/eval-base.txt"
compare_into compare.txt --run-id $NAME-base --a 0 --other-run $NAME-rl --b 1   # the shared start
compare_into compare.txt --run-id $NAME-base --a 0 --other-run $NAME-sft --b current
compare_into compare.txt --run-id $NAME-base --a 0 --other-run $NAME-rl --b current
strip_paths
