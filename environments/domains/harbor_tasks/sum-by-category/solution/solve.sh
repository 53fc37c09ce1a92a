#!/bin/bash
set -e
cd /app && python3 -c "import csv, collections; t = collections.Counter(); [t.update({r['category']: int(r['amount'])}) for r in csv.DictReader(open('sales.csv'))]; open('totals.csv', 'w').write('category,total\n' + ''.join(f'{k},{v}\n' for k, v in sorted(t.items())))"
