#!/bin/bash
set -e
cd /app && python3 -c "import json,csv,sys; w=csv.writer(open('users.csv','w',newline=''),lineterminator='\n'); w.writerow(['id','name','email']); [w.writerow([u['id'],u['name'],u['email']]) for u in json.load(open('users.json'))]"
