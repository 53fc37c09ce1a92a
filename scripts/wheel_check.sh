#!/usr/bin/env bash
# The package as a user installs it: build the wheel from this clone, install it with its
# base dependencies only (the light client: no torch, vLLM or DeepSpeed) into a clean venv
# outside the clone, and run it from a directory that is not the clone: --version,
# `domains`, and a small offline session on a production log (ingest, query, report).
# .ci/run runs it; it needs the package index (or a pip cache that holds the base pins).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/venv"
pip=("$work/venv/bin/pip" -q --disable-pip-version-check)
"${pip[@]}" wheel --no-deps -w "$work/dist" "$repo"
"${pip[@]}" install -c "$repo/requirements/constraints-cpu.txt" "$work"/dist/rl_flywheel-*.whl
cp "$repo/examples/traces/invoices.jsonl" "$work/"
cd "$work"
export PATH="$work/venv/bin:$PATH"

fail() { echo "wheel_check: $*" >&2; exit 1; }
for heavy in torch vllm deepspeed transformers; do
  ! python -c "import $heavy" 2>/dev/null || fail "the light client installed $heavy"
done
flywheel --version
flywheel domains > domains.txt || fail "flywheel domains failed"
grep -q "^code " domains.txt || fail "flywheel domains lists no code domain: $(head -3 domains.txt)"
flywheel ingest invoices.jsonl --run-id prod
flywheel query "select count(*) as n from traces" --run-id prod --format csv > count.csv
[ "$(tail -1 count.csv)" -gt 0 ] || fail "no traces after ingest: $(cat count.csv)"
flywheel report --by workload --run-id prod > report.txt || fail "flywheel report failed"
[ -d runs/prod ] || fail "ingest wrote nothing under runs/prod"
! python -c "import torch" 2>/dev/null || fail "a command installed torch"
echo "wheel_check: ok ($(flywheel --version); light client, $(wc -l < domains.txt) lines of domains," \
  "$(tail -1 count.csv) traces ingested)"
