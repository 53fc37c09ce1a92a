#!/usr/bin/env bash
# Another GRPO arm for a split bench/split_budget.sh has made: the same start (the shared SFT
# policy, exported to runs/<NAME>/sft20), the same sampler prior (that policy's evaluation,
# made again here as the new run's version 0), the same 10 minutes, in the same lake, so it
# pairs with the arms already there. ARM names the arm (run <NAME>-<ARM>); RL_SET (split_common.sh)
# holds the settings that make it differ from split_budget.sh's GRPO arm. Run after
# split_budget.sh with the same NAME, LEVELS and SEED.
#   NAME=split-l123 LEVELS="[1, 2, 3]" ARM=rls RL_SET="trainer.share_prompt=true" \
#     bash bench/split_rl_arm.sh                                       # ~35 min
#   SEED=1 NAME=split-noref-s1 ARM=code RL_SET="sampler.domains=[code]" bash bench/split_rl_arm.sh
source "$(dirname "$0")/split_common.sh"
ARM=${ARM:?name the arm}
RUN=$NAME-$ARM
C+=(--set "model.path=$SFT20")
step $FW eval "${C[@]}" --run-id $RUN                    > "$OUT/eval-$ARM-start.txt"
step $FW run "${C[@]}" --run-id $RUN "${RL_ARGS[@]}" > "$OUT/rl-$ARM-arm.txt"
cp runs/$RUN/cycles.jsonl "$OUT/rl-$ARM-cycles.jsonl"
step $FW eval "${C[@]}" --run-id $RUN                    > "$OUT/eval-rl-$ARM-arm.txt"
compare_into compare-$ARM.txt --run-id $NAME-sft --a current --other-run $RUN --b current
compare_into compare-$ARM.txt --run-id $NAME-rl --a 1 --other-run $RUN --b current
compare_into compare-$ARM.txt --run-id $NAME-rl --a current --other-run $RUN --b current
compare_into compare-$ARM.txt --run-id $NAME-base --a 0 --other-run $RUN --b current
strip_paths
