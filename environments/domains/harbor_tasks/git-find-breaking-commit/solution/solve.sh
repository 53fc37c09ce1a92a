#!/bin/bash
set -e
cd /app && git log --reverse --format=%H main | while read c; do git show "$c:version.txt" > /tmp/v.txt; if [ "$(cat /tmp/v.txt)" -ge 5 ]; then echo "$c" > bad_commit.txt; break; fi; done
