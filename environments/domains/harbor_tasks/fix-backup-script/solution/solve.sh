#!/bin/bash
set -e
cd /app && sed -i 's/"\$dst"/"$dest"/' backup.sh && bash backup.sh
