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
check 'python3 -m unittest discover -s tests >/dev/null 2>&1'
check 'python3 -c "from pager import paginate as p; assert p(list(range(10)), 4, 3) == [9] and p([], 1, 5) == []"'
check 'python3 -c "from pager import page_count as c; assert c(9, 3) == 3 and c(0, 4) == 0 and c(1, 4) == 1"'
echo "$passed/$total checks hold"
python3 -c "print(round($passed / $total, 4))" > /logs/verifier/reward.txt
[ "$passed" = "$total" ]
