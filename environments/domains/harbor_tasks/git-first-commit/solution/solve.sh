#!/bin/bash
set -e
cd /app && git init -q && git add README.md main.py && git -c user.name=Dev -c user.email=dev@example.com commit -qm "initial commit"
