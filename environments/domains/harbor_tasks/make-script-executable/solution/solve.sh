#!/bin/bash
set -e
chmod u+x /app/run.sh && /app/run.sh
