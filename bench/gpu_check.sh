#!/usr/bin/env bash
# The prepared check for a lent single-GPU machine (~10 minutes of device time): a short
# bf16 cycle of the 0.5B model, printing rollout tokens/s, update MFU against the GPU's
# bf16 peak, and weight-sync time (bench/gpu_check.py says how). Needs torch, transformers
# and peft only: vLLM when installed, else the transformers engine; the plain-torch trainer,
# no DeepSpeed; the checkout need not be installed. From the project root:
#     bash bench/gpu_check.sh [--model DIR] [--out FILE]   # random 0.5B-shaped weights without --model
#     bash bench/gpu_check.sh --dry-run                    # CPU, tiny random model, 1 step (CI runs it)
# The whole check is cut at GPU_CHECK_TIMEOUT seconds (default 420), leaving time to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then  # this checkout's venv where it is set up, else the machine's python
  PY=python3
  [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
start=$(date +%s)
timeout "${GPU_CHECK_TIMEOUT:-420}" "$PY" bench/gpu_check.py --out "${GPU_CHECK_OUT:-runs/gpu-check.json}" "$@"
echo "gpu_check: wall $(( $(date +%s) - start ))s, report in ${GPU_CHECK_OUT:-runs/gpu-check.json}"
