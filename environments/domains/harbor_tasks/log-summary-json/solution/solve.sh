#!/bin/bash
set -e
cd /app && python3 - <<'EOF'
import glob, gzip, json
counts = {'INFO': 0, 'WARN': 0, 'ERROR': 0}
for p in glob.glob('logs/app.log*'):
    opener = gzip.open if p.endswith('.gz') else open
    with opener(p, 'rt') as f:
        for line in f:
            parts = line.split()
            if len(parts) > 1 and parts[1] in counts:
                counts[parts[1]] += 1
json.dump(counts, open('summary.json', 'w'))
EOF
