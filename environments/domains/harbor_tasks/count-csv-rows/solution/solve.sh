#!/bin/bash
set -e
tail -n +2 /app/data.csv | wc -l | tr -d " " > /app/count.txt
