#!/bin/bash
set -e
cd /app && tr -cs '[:alpha:]' '\n' < book.txt | tr '[:upper:]' '[:lower:]' | grep -v '^$' | grep -vxFf stopwords.txt | sort | uniq -c | sort -k1,1nr -k2,2 | head -5 | sed 's/^ *\([0-9]*\) \(.*\)$/\2 \1/' > report.txt
