#!/bin/bash
echo ok > "$(dirname "$0")/ran.txt"
