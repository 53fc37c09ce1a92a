#!/bin/bash
set -euo pipefail
src="$(dirname "$0")/notes"
dest="$(dirname "$0")/backup"
mkdir -p "$dst"
cp "$src"/*.txt "$dest"/
