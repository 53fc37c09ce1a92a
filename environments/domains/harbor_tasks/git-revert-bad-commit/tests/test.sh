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
check 'python3 check.py >/dev/null 2>&1'
check 'python3 -c "from more import sub; assert sub(5, 3) == 2"'
check '[ "$(git rev-list --count HEAD)" -ge 4 ]'
check 'git log --format=%s | grep -qx "calc: speed up mul"'
check '[ -z "$(git status --porcelain --untracked-files=no)" ]'
echo "$passed/$total checks hold"
python3 -c "print(round($passed / $total, 4))" > /logs/verifier/reward.txt
[ "$passed" = "$total" ]
