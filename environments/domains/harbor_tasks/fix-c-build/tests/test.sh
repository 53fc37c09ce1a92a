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
check 'make -s >/dev/null 2>&1'
check '[ "$(./stats 3 4 5)" = "sum=12 max=5" ]'
check '[ "$(./stats 9 1)" = "sum=10 max=9" ]'
check '[ "$(./stats -4 -2 -9)" = "sum=-15 max=-2" ]'
check 'git diff --no-index --quiet /tests/Makefile.orig Makefile'
echo "$passed/$total checks hold"
python3 -c "print(round($passed / $total, 4))" > /logs/verifier/reward.txt
[ "$passed" = "$total" ]
