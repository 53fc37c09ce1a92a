#!/bin/bash
set -euo pipefail
cd "$(dirname "$0")"
rm -rf dist && mkdir dist
for f in src/*.py; do python3 -m py_compile "$f"; done
cat src/*.py > dist/bundle.txt
echo built
