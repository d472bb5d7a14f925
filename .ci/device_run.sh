#!/usr/bin/env bash
# One call on the GPU machine (Python 3.12 + torch 2.11, no network): build
# kiln there, run the C++ and Python tests, regenerate the 3.12 sections of
# the golden traces, and leave the results under $OUT for review here.
#
#   device run: bash .ci/device_run.sh        (carry: .carry)
#   tests only: KILN_DEVICE_BENCH=0 bash .ci/device_run.sh
#   in parts, when one call would pass the tool's 10-minute limit (the
#   build stays on a warm machine between calls):
#     KILN_DEVICE_PART=build bash .ci/device_run.sh    configure, build, C++ tests
#     KILN_DEVICE_PART=pytest bash .ci/device_run.sh   Python tests and goldens
#     KILN_DEVICE_PART=bench bash .ci/device_run.sh    benchmarks
#     KILN_DEVICE_PART=cuda_bench bash .ci/device_run.sh   CUDA benchmarks
#                                                          (benchmarks/inductor_cuda.py,
#                                                          benchmarks/cuda_overhead.py,
#                                                          benchmarks/cuda_compile_time.py,
#                                                          benchmarks/gpt_step_cuda.py)
#     KILN_DEVICE_PART=zoo bash .ci/device_run.sh          GPU zoo rows: KILN_ZOO_MODELS
#                                                          (default hf-llama-6l), KILN_ZOO_MODE
#                                                          (train), KILN_ZOO_ARGS (more
#                                                          zoo_gpu.py options); one row a
#                                                          process, each bounded by
#                                                          KILN_ZOO_LIMIT seconds (200); the
#                                                          table and executor host logs in
#                                                          $OUT/zoo.txt, the rest in $OUT/zoo.tgz
#   KILN_DEVICE_TARGETS="kiln_core kiln_pyext kiln" builds only what the
#   benchmarks need (about 40% less build time; no C++ tests then).
#   KILN_CUDA_BENCH_ARGS=--sweep adds inductor_cuda.py's sweep over every
#   launch configuration of the softmax->layer_norm kernel;
#   KILN_GPT_BENCH_ARGS replaces gpt_step_cuda.py's default --repeat 3
#   (interleaved runs, medians); "--repeat 1 --profile" adds kernel profiles.
#   (comma-separated: build,pytest). KILN_DEVICE_PYTEST=FILES... limits the
#   Python tests run (default tests/python); goldens are regenerated anyway.
#   KILN_TEST_DEVICE=cuda runs the Python tests on CUDA tensors (see
#   tests/python/conftest.py); goldens are then not regenerated.
#
# .carry/pylib holds pytest and its pure-Python dependencies, copied from
# the project's .venv by `bash .ci/device_carry.sh`, for images without it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/kiln-device-out}
PART=${KILN_DEVICE_PART:-all}
want() { [ "$PART" = all ] || [[ ",$PART," == *",$1,"* ]]; }
mkdir -p "$OUT"
LOG="$OUT/log.txt"
PY=$(command -v python3)
export PYTHONUNBUFFERED=1
{
  echo "== machine"; nvidia-smi -L; nproc
  "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, torch.cuda.is_available())'
} >"$LOG" 2>&1
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  export PYTHONPATH="$PWD/.carry/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
want build && {
  echo "== configure"
  # The image's default compiler (/opt/gcc) links its own libstdc++ into
  # shared libraries; a second libstdc++ beside torch's crashes iostreams.
  # Build with the system g++ that torch's libstdc++ belongs to.
  compilers=()
  if [ -x /usr/bin/g++ ]; then compilers=(-DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++); fi
  cmake -S . -B build-device -G Ninja -DKILN_PYTHON="$PY" -DKILN_WITH_LLVM=OFF "${compilers[@]}" 2>&1 | tail -4
  echo "== build"
  # shellcheck disable=SC2086  # a list of targets
  cmake --build build-device -j"$(nproc)" ${KILN_DEVICE_TARGETS:+--target $KILN_DEVICE_TARGETS} -- -k 0 2>&1 | grep -E "error|warning|FAILED|Linking" | head -60
} >>"$LOG" 2>&1
status=0
if want build && [ -x build-device/kiln_cpp_tests ]; then
  build-device/kiln_cpp_tests >"$OUT/cpp_tests.txt" 2>&1 || status=1
fi
# The tests look for the kiln binary and the embedding example under build/.
[ -e build ] || ln -s build-device build
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# The goldens are compared first; then regenerated for review, so a new
# trace file gets its 3.12 section (merge it here, see docs/architecture.md).
if want pytest; then
  # shellcheck disable=SC2086  # a list of test paths
  "$PY" -m pytest ${KILN_DEVICE_PYTEST:-tests/python} -q -W ignore -p no:cacheprovider >"$OUT/pytest.txt" 2>&1 || status=1
  # Goldens record CPU traces; a corpus run on another device
  # (KILN_TEST_DEVICE) leaves them alone.
  if [ -z "${KILN_TEST_DEVICE:-}" ]; then
    KILN_UPDATE_GOLDEN=1 "$PY" -m pytest tests/python/test_traces.py -q -W ignore >>"$LOG" 2>&1 || status=1
    tar -cf "$OUT/traces.tar" tests/traces
  fi
fi
# KILN_DEVICE_BENCH=0 skips the benchmarks (a tests-only run).
if want bench && [ "${KILN_DEVICE_BENCH:-1}" != 0 ]; then {
  if [ -x build-device/kiln_bench ]; then
    build-device/kiln_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true || status=1
  fi
  echo "== benchmarks/models/trace_time.py"
  "$PY" benchmarks/models/trace_time.py || status=1
} >"$OUT/bench.txt" 2>&1; fi
if want cuda_bench && [ "${KILN_DEVICE_BENCH:-1}" != 0 ]; then
  # shellcheck disable=SC2086  # a list of options
  "$PY" benchmarks/inductor_cuda.py ${KILN_CUDA_BENCH_ARGS:-} >"$OUT/cuda_bench.txt" 2>&1 || status=1
  "$PY" benchmarks/cuda_overhead.py >>"$OUT/cuda_bench.txt" 2>&1 || status=1
  "$PY" benchmarks/cuda_compile_time.py >>"$OUT/cuda_bench.txt" 2>&1 || status=1
  # shellcheck disable=SC2086  # a list of options
  "$PY" benchmarks/gpt_step_cuda.py ${KILN_GPT_BENCH_ARGS:---repeat 3} >>"$OUT/cuda_bench.txt" 2>&1 || status=1
  cat "$OUT/cuda_bench.txt"
fi
# One process a row, so a row that hangs or runs out of memory costs only
# itself; the tool returns few files, so the details travel as one archive.
# Only when asked for by name (not part of "all").
if [[ ",$PART," == *",zoo,"* ]]; then
  zoo_dir=$(mktemp -d)
  for model in ${KILN_ZOO_MODELS:-hf-llama-6l}; do
    # shellcheck disable=SC2086  # a list of options
    timeout "${KILN_ZOO_LIMIT:-200}" "$PY" benchmarks/zoo_gpu.py --models "$model" --mode "${KILN_ZOO_MODE:-train}" \
      --rounds 2 --host-log ${KILN_ZOO_ARGS:-} --json "$zoo_dir/$model.json" >"$zoo_dir/$model.txt" 2>"$zoo_dir/$model.err" ||
      echo "$model: exit $?" >>"$OUT/zoo.txt"
    cat "$zoo_dir/$model.txt" >>"$OUT/zoo.txt"
    grep "executor run" "$zoo_dir/$model.err" | cut -c1-1500 >>"$OUT/zoo.txt"
  done
  tar -czf "$OUT/zoo.tgz" -C "$zoo_dir" .
fi
tail -3 "$OUT/cpp_tests.txt" "$OUT/pytest.txt" 2>/dev/null
exit $status
