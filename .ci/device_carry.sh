#!/usr/bin/env bash
# Fills .carry/pylib (git-ignored) with the pure-Python pytest and its
# dependencies from the project's .venv (setup.sh makes it), for
# .ci/device_run.sh on a GPU machine that lacks pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" ||
  { echo "device_carry.sh: no .venv here; run ./setup.sh first" >&2; exit 1; }
mkdir -p .carry/pylib
for package in pytest _pytest py.py pluggy iniconfig packaging pygments; do
  if [ -e "$site/$package" ]; then
    cp -r "$site/$package" .carry/pylib/
  fi
done
find .carry -name __pycache__ -prune -exec rm -rf {} +
