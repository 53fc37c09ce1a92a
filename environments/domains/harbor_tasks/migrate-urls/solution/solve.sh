#!/bin/bash
set -e
cd /app && find docs -name '*.md' -exec sed -i 's#http://old\.example\.com#https://new.example.com#g' {} +
