#!/usr/bin/env bash
# Includes run down the layers, never up: a file may include its own
# folder and the folders of lower layers. The layers, bottom first (a
# row's folders may also include each other only where the row says so):
#   0 base         PyRef, logging, text, the torch handles: no kiln includes
#   1 graph cpython the traced graph; CPython's bytecode, opcode tables, frames
#   2 prims        the prim IR, torch-op spellings, decompositions
#   3 runtime      executors (eager, prim, staged, CUDA graphs), the ATen bridge
#   4 autograd inductor guards   joint graphs and partitions; kernels; guards
#   5 tracer stdlib   symbolic bytecode interpretation and its library (one layer)
#   6 interpreter  the compile driver, PEP 523 hook, binary and embedding
#   7 python       the extension module
# kiln/ is the public embedding header (include/kiln): it includes nothing
# of kiln's, so it sits with base.
# Fails listing each include that runs up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -A layer=(
  [base]=0 [graph]=1 [cpython]=1 [prims]=2 [runtime]=3 [autograd]=4 [inductor]=4 [guards]=4
  [tracer]=5 [stdlib]=5 [interpreter]=6 [python]=7 [kiln]=0
)
# Pairs of one layer that may include each other.
same_layer_ok() { [[ "$1:$2" == tracer:stdlib || "$1:$2" == stdlib:tracer ]]; }

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_files() { git ls-files --cached --others --exclude-standard; }
else
  list_files() { find . -path ./.git -prune -o -path './build*' -prune -o -type f -printf '%P\n'; }
fi

bad=0
while IFS= read -r file; do
  folder=${file%%/*}
  [[ -n "${layer[$folder]+x}" ]] || continue
  while IFS=: read -r line target; do
    dir=${target%%/*}
    [[ "$dir" == "$folder" || -z "${layer[$dir]+x}" ]] && continue
    if (( layer[$dir] > layer[$folder] )) || { (( layer[$dir] == layer[$folder] )) && ! same_layer_ok "$folder" "$dir"; }; then
      echo "$file:$line: includes $target ($dir is layer ${layer[$dir]}, $folder is layer ${layer[$folder]})"
      bad=1
    fi
  done < <(grep -noE '^#include "[a-z_]+/[^"]+"' "$file" | sed -E 's/^([0-9]+):#include "([^"]+)"/\1:\2/')
done < <(list_files | grep -E '\.(c|cc|cpp|h|hpp)$')
if (( bad )); then
  echo "check_layers: includes must not run up the layers (see the table at the top of .ci/check_layers.sh)" >&2
  exit 1
fi
echo "check_layers: ok"
