#!/bin/bash
# passes while the version number is below 5
[ "$(cat "$(dirname "$0")/version.txt")" -lt 5 ]
