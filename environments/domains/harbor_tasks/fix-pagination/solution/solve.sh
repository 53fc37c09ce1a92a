#!/bin/bash
set -e
cd /app && cat > pager/core.py <<'EOF'
def page_count(n, size):
    return (n + size - 1) // size


def paginate(items, page, size):
    start = (page - 1) * size
    return items[start:start + size]
EOF
