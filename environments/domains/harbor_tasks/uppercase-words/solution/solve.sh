#!/bin/bash
set -e
tr "[:lower:]" "[:upper:]" < /app/words.txt > /app/WORDS.txt
