#!/bin/bash
set -e
mv /app/settings.ini.bak /app/settings.ini
