#!/usr/bin/env bash
# Fills .carry/pylib (git-ignored) with Debian's pure-Python pytest and its
# dependencies, for .ci/device_run.sh on a GPU machine that lacks pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .carry/pylib
for package in pytest _pytest pluggy iniconfig packaging py attr attrs exceptiongroup tomli; do
  if [ -e "/usr/lib/python3/dist-packages/$package" ]; then
    cp -r "/usr/lib/python3/dist-packages/$package" .carry/pylib/
  fi
done
find .carry -name __pycache__ -prune -exec rm -rf {} +
