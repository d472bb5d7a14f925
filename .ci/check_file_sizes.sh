#!/usr/bin/env bash
# A file holds one idea: no compiler source (C, C++, the Python package)
# grows past 1,200 lines. Tests, benchmarks and generated tables are not
# held to it. Fails listing the files over the limit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
limit=1200
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_files() { git ls-files --cached --others --exclude-standard; }
else
  list_files() { find . -path ./.git -prune -o -path './build*' -prune -o -type f -printf '%P\n'; }
fi
over="$(list_files | grep -E '^(base|cpython|graph|prims|runtime|autograd|inductor|guards|tracer|stdlib|interpreter|python)/.*\.(c|cpp|h|py)$' |
        while IFS= read -r f; do n=$(wc -l < "$f"); (( n > limit )) && echo "$f: $n lines"; done || true)"
if [[ -n "$over" ]]; then
  printf '%s\n' "$over"
  echo "check_file_sizes: split these files by idea (limit $limit lines)" >&2
  exit 1
fi
echo "check_file_sizes: ok"
