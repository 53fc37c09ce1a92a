#!/bin/bash
set -e
cd /app && sed 's/^ *//; s/ *$//' emails.txt | tr '[:upper:]' '[:lower:]' | LC_ALL=C sort -u > unique.txt
