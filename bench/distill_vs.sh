#!/usr/bin/env bash
# Issue 47, item 3: on-policy distillation against GRPO, held-out learning at equal wall time.
# Three arms from ONE student and ONE config, each for MINUTES of wall time:
#   grpo   distill.mode=off   GRPO alone
#   only   distill.mode=only  the teacher's reverse KL on the student's samples is the signal
#   both   distill.mode=add   GRPO's loss + WEIGHT x that term
# The teacher scores every update's tokens inside the update stage (policy/teacher.py), and its
# loading and scoring count in the arm's wall time: the distilling arms run fewer cycles in the
# same minutes, which is the comparison asked for. One lake, so that every `flywheel compare`
# pairs the same held-out tasks (each run evaluates its starting and its last policy, the
# eval suites included: eval.in_run_suites). Runs one arm after another (never two at once).
#
#   STUDENT=<0.5B dir> TEACHER=<1.5B dir> CFG=<0.5B recipe> bash bench/distill_vs.sh
#       MINUTES (60), WEIGHT (1.0) and EXTRA (more --set overrides, space-separated) as wanted
#   SMOKE=1 bash bench/distill_vs.sh
#       two tiny random-weight models (the test model and another seed as teacher), one math
#       task per cycle, 2 cycles an arm: checks the wiring end to end, measures nothing
set -euo pipefail
cd "$(dirname "$0")/.."
FW=.venv/bin/flywheel
PY=.venv/bin/python
MINUTES=${MINUTES:-60}
WEIGHT=${WEIGHT:-1.0}
DIR=runs/distill-vs
extra=()
if [ -n "${SMOKE:-}" ]; then
  DIR=runs/distill-vs-smoke
  mkdir -p "$DIR"
  [ -d "$DIR/student" ] || $PY -c "import flywheel; flywheel.use_offline_defaults()
from flywheel.run.model_prep import build_tiny_model as b; b('$DIR/student', seed=0); b('$DIR/teacher', seed=1)"
  STUDENT=$DIR/student TEACHER=$DIR/teacher MINUTES=${SMOKE_MINUTES:-3}
  extra=(--cycles 2 --set engine.backend=hf --set sampler.domains=[math] --set sampler.levels=[1]
         --set sampler.tasks_per_cycle=2 --set generation.k=2 --set generation.max_tokens=16
         --set eval.in_run_tasks_per_level=1 --set eval.suites=[] --set trainer.learning_rate=1e-3)
fi
: "${STUDENT:?STUDENT: the student model dir (Qwen2.5-Coder-0.5B-Instruct)}"
: "${TEACHER:?TEACHER: the teacher model dir (Qwen2.5-Coder-1.5B-Instruct, the same tokenizer)}"
LAKE=$DIR/lake
OUT=bench/results/distill-vs-$(date -u +%Y-%m-%d)${SMOKE:+-smoke}
mkdir -p "$OUT"
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; /usr/bin/time -f "   wall %e s" -a -o "$OUT/steps.log" "$@"; }
common=(--model "$STUDENT" --set "store.uri=$LAKE" --set "max_wall_minutes=$MINUTES" --set eval.in_run_suites=true
        --set "distill.teacher=$TEACHER" --set "distill.weight=$WEIGHT")
[ -n "${CFG:-}" ] && common=(--config "$CFG" "${common[@]}")
[ -n "${SMOKE:-}" ] || common+=(--cycles 1000)  # the wall-time limit ends each arm
for kv in ${EXTRA:-}; do common+=(--set "$kv"); done
tag=$(date -u +%H%M%S)  # a fresh run id per invocation: a rerun never resumes an old arm
for arm in grpo only both; do
  case $arm in grpo) mode=off ;; only) mode=only ;; both) mode=add ;; esac
  step $FW run "${common[@]}" "${extra[@]}" --run-id "dv-$arm-$tag" --set "distill.mode=$mode" > "$OUT/$arm.txt"
  cp "runs/dv-$arm-$tag/cycles.jsonl" "$OUT/$arm-cycles.jsonl"
  cp "runs/dv-$arm-$tag/updates.jsonl" "$OUT/$arm-updates.jsonl" 2>/dev/null || true  # teacher_s, distill_kl
done
cmp() { $FW compare --store "$LAKE" "$@" >> "$OUT/compare.txt"; }
cmp --run-id "dv-grpo-$tag" --a current --other-run "dv-only-$tag" --b current  # distillation alone - GRPO
cmp --run-id "dv-grpo-$tag" --a current --other-run "dv-both-$tag" --b current  # both - GRPO
cmp --run-id "dv-only-$tag" --a current --other-run "dv-both-$tag" --b current  # both - distillation alone
for arm in grpo only both; do cmp --run-id "dv-$arm-$tag" --a 0 --b current; done  # each arm's own gain
sed -i -e "s|$PWD/||g" -e "s|$HOME/|~/|g" "$OUT"/*.txt "$OUT/steps.log"
echo "distill_vs: results in $OUT"
