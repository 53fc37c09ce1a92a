#!/bin/bash
set -e
cd /app && git merge -q --no-edit feature
