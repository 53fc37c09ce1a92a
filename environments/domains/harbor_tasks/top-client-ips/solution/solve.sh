#!/bin/bash
set -e
cd /app && cut -d' ' -f1 access.log | sort | uniq -c | sort -k1,1nr -k2,2 | head -3 | sed 's/^ *//' > top_ips.txt
