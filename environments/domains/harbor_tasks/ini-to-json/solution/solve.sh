#!/bin/bash
set -e
cd /app && python3 - <<'EOF'
import configparser, json
cp = configparser.ConfigParser()
cp.read('config.ini')
def typed(v):
    if v.lower() in ('true', 'false'):
        return v.lower() == 'true'
    try:
        return int(v)
    except ValueError:
        return v
json.dump({s: {k: typed(v) for k, v in cp[s].items()} for s in cp.sections()}, open('config.json', 'w'))
EOF
