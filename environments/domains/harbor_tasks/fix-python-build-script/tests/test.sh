#!/bin/bash
# Harbor verifier: the fraction of checks that hold goes to /logs/verifier/reward.txt;
# the exit code is 0 only when every check holds.
mkdir -p /logs/verifier
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 1; }
passed=0
total=0
check() {
  total=$((total + 1))
  if (eval "$1") >/dev/null 2>&1; then passed=$((passed + 1)); else echo "FAILED: $1"; fi
}
check 'bash build.sh >/dev/null 2>&1'
check '[ -f dist/bundle.txt ]'
check 'python3 -c "import sys; sys.path.insert(0, \"src\"); import report, io, contextlib; b = io.StringIO(); contextlib.redirect_stdout(b).__enter__(); report.report([1, 2]); assert b.getvalue() == \"1\n2\n\""'
check 'grep -q "CM_PER_INCH" dist/bundle.txt'
echo "$passed/$total checks hold"
python3 -c "print(round($passed / $total, 4))" > /logs/verifier/reward.txt
[ "$passed" = "$total" ]
