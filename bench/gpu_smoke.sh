#!/usr/bin/env bash
# One flywheel cycle of the default model on one CUDA GPU, then rollout tokens/s and the
# update phase's MFU. Run from the project root on a GPU machine with CUDA PyTorch,
# vLLM (the `gpu` extra) and DeepSpeed installed:
#     bash bench/gpu_smoke.sh [--peak-tflops 989]      # H100/H200 dense bf16 peak
# Uses bubblewrap when present, else the unsafe process sandbox (GPU images often lack
# it; the code run is the model's own answers to generated tasks).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PEAK=${2:-989}
SANDBOX=bwrap
command -v bwrap >/dev/null || { SANDBOX=process; echo "gpu_smoke: no bwrap here, using the unsafe process sandbox"; }
RUN=gpu-smoke-$(date +%s)
start=$(date +%s)
timeout 600 $PY -m flywheel.cli run --cycles 1 --run-id "$RUN" \
  --set sandbox.backend=$SANDBOX --set engine.dtype=bfloat16 --set trainer.bf16=true \
  --set sampler.tasks_per_cycle=64 --set generation.k=8 \
  --set trainer.micro_batch_tokens=32768
echo "gpu_smoke: wall $(( $(date +%s) - start ))s"
$PY bench/gpu_report.py "runs/$RUN" --peak-tflops "$PEAK"
