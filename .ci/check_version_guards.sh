#!/usr/bin/env bash
# Python-version facts live only in cpython/ (per-version tables); any
# version check elsewhere is a fact leaking out of it, and so is a test of
# an instruction's raw CPython opcode name (which differs by version: the
# tables normalize opcodes into Ops). Fails listing them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pattern='PY_VERSION_HEX|PY_MINOR_VERSION|strn?cmp\([^;]*raw_name|raw_name *[!=]='
sources='\.(c|cc|cpp|cxx|h|hh|hpp|hxx|inc|inl|cu|cuh)$'

# Tracked and new files, not build outputs or carried third-party headers.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_files() { git ls-files -z --cached --others --exclude-standard; }
else
  list_files() { find . -path ./.git -prune -o -path './build*' -prune -o -type f -printf '%P\0'; }
fi

offenders="$(list_files | grep -zE "$sources" | grep -zvE '^(tests/cpp/)?cpython/' |
             xargs -0r grep -snE "$pattern" -- || true)"
if [[ -n "$offenders" ]]; then
  printf '%s\n' "$offenders"
  echo "check_version_guards: Python version checks and raw opcode names belong in cpython/ (per-version tables), not here" >&2
  exit 1
fi
echo "check_version_guards: ok"
