#!/usr/bin/env bash
# The GRPO arm of bench/split_budget.sh again, once the update shares each group's prompt
# (trainer.share_prompt, on by default on CPU): the same start (the shared SFT policy,
# exported to runs/<NAME>/sft20), the same sampler prior (that policy's evaluation, made
# again here as the new run's version 0), the same 10 minutes, in the same lake, so it
# pairs with the arms already there. Run after split_budget.sh with the same NAME/LEVELS.
#   NAME=split-l123 LEVELS="[1, 2, 3]" bash bench/split_share_arm.sh    # ~35 min
source "$(dirname "$0")/split_common.sh"
RUN=$NAME-rls
C+=(--set "model.path=$SFT20")
step $FW eval "${C[@]}" --run-id $RUN                    > "$OUT/eval-share-start.txt"
step $FW run "${C[@]}" --run-id $RUN "${RL_ARGS[@]}" --set trainer.share_prompt=true \
                                                         > "$OUT/rl-share-arm.txt"
cp runs/$RUN/cycles.jsonl "$OUT/rl-share-cycles.jsonl"
step $FW eval "${C[@]}" --run-id $RUN                    > "$OUT/eval-rl-share-arm.txt"
compare_into compare-share.txt --run-id $NAME-sft --a current --other-run $RUN --b current
compare_into compare-share.txt --run-id $NAME-rl --a 1 --other-run $RUN --b current
compare_into compare-share.txt --run-id $NAME-rl --a current --other-run $RUN --b current
strip_paths
