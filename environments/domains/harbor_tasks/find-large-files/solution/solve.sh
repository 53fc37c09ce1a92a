#!/bin/bash
set -e
cd /app && find data -type f -size +1000c | LC_ALL=C sort > large.txt
