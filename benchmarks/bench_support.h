// Shared by kiln_bench's files: the embedded interpreter that bench_main.cpp
// starts (torch and kiln imported, GIL held by the benchmark thread) and a
// namespace holding the Python objects the benchmarks time.
#pragma once

#include <Python.h>

#include <cstdint>

// Around timed loops: under `valgrind --tool=callgrind --collect-atstart=no`
// only these loops are counted (see benchmarks/README.md), and main() prints
// how many iterations were collected, to turn totals into per-call costs.
// Elsewhere they cost nothing.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define KILN_BENCH_COLLECT_BEGIN() CALLGRIND_TOGGLE_COLLECT
#define KILN_BENCH_COLLECT_END(state)                                 \
  do {                                                                \
    CALLGRIND_TOGGLE_COLLECT;                                         \
    if (RUNNING_ON_VALGRIND) ::kiln::bench::note_collected((state).iterations()); \
  } while (0)
#else
#define KILN_BENCH_COLLECT_BEGIN() ((void)0)
#define KILN_BENCH_COLLECT_END(state) ((void)0)
#endif

namespace kiln::bench {

// The namespace (a dict) that bench_main.cpp filled with `torch`, `kiln` and
// the functions and tensors the call-overhead benchmarks use. Borrowed.
PyObject* namespace_dict();

// Evaluates a Python expression in namespace_dict(). Returns a new
// reference, or null after printing the traceback.
PyObject* eval(const char* expression);

// kiln.stats() as numbers; false (and the error printed) if it failed.
struct KilnStats {
  int64_t traces = 0;
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t eager_runs = 0;
};
bool read_kiln_stats(KilnStats* out);

// Adds to the count of iterations run with callgrind collecting.
void note_collected(int64_t iterations);

}  // namespace kiln::bench
