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
check '! grep -rq "http://old.example.com" --include="*.md" docs'
check 'grep -q "https://new.example.com/start" docs/index.md'
check 'grep -q "https://new.example.com/dl" docs/guide/setup.md'
check '[ "$(cat docs/links.txt)" = "http://old.example.com" ]'
check '[ "$(cat docs/guide/notes.md)" = "Nothing here." ]'
echo "$passed/$total checks hold"
python3 -c "print(round($passed / $total, 4))" > /logs/verifier/reward.txt
[ "$passed" = "$total" ]
