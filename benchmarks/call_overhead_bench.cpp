// Per-call overhead of a compiled function over the same function run
// eagerly. bench_main.cpp defines, in the embedded interpreter,
//
//   def f1(x): return x + 1                         inputs_1: one 1-element tensor
//   def f8(a, ..., h): return a + b + ... + h       inputs_8: eight of them
//   compiled_f1 = kiln.compile(f1, backend="eager"), compiled_f8 likewise
//
// and each benchmark calls one of them from C++ with PyObject_Vectorcall on
// the same inputs in the same loop:
//
//   BM_Call_Eager/N        f1 or f8 itself (kiln's frame hook is installed,
//                          as it is in any process that has called a compiled
//                          function, and returns at once: no compile context)
//   BM_Call_Compiled/N     compiled_f1 or compiled_f8, warmed so every call is
//                          a cache hit (guards + graph replay, bytecode skipped)
//   BM_Call_EagerNoHook/N  f1 or f8 with CPython's own evaluator, to show what
//                          the installed hook costs code that is not compiled
//
// main() prints compiled minus eager ("added ns per call") at the end. The
// compiled benchmark checks kiln.stats() before and after its loop and fails
// (SkipWithError) unless every call was a cache hit with no new trace and no
// eager fallback: it must never silently time the eager path.

#include <Python.h>
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "benchmarks/bench_support.h"
#include "interpreter/frame_hook.h"

namespace kiln::bench {
namespace {

// A function and its arguments, borrowed from the benchmark namespace.
struct Call {
  PyObject* fn = nullptr;
  std::vector<PyObject*> args;

  // Calls once; false (traceback printed) on error.
  bool once() const {
    PyObject* result = PyObject_Vectorcall(fn, args.data(), args.size(), nullptr);
    if (result == nullptr) {
      PyErr_Print();
      return false;
    }
    Py_DECREF(result);
    return true;
  }
};

bool lookup(const std::string& fn_name, int n, Call* out) {
  PyObject* ns = namespace_dict();
  out->fn = PyDict_GetItemString(ns, fn_name.c_str());
  PyObject* inputs = PyDict_GetItemString(ns, ("inputs_" + std::to_string(n)).c_str());
  if (out->fn == nullptr || inputs == nullptr || !PyTuple_Check(inputs) ||
      PyTuple_GET_SIZE(inputs) != n) {
    return false;
  }
  out->args.assign(&PyTuple_GET_ITEM(inputs, 0), &PyTuple_GET_ITEM(inputs, 0) + n);
  return true;
}

// The timed loop, shared so every variant runs exactly the same code.
bool call_loop(benchmark::State& state, const Call& call) {
  PyObject* fn = call.fn;
  PyObject* const* args = call.args.data();
  const size_t nargs = call.args.size();
  for (auto _ : state) {
    PyObject* result = PyObject_Vectorcall(fn, args, nargs, nullptr);
    if (result == nullptr) {
      PyErr_Print();
      state.SkipWithError("the call raised");
      return false;
    }
    Py_DECREF(result);
  }
  return true;
}

void BM_Call_Eager(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call call;
  if (!lookup("f" + std::to_string(n), n, &call) || !call.once()) {
    state.SkipWithError("cannot call the eager function");
    return;
  }
  call_loop(state, call);
}

void BM_Call_EagerNoHook(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call call;
  if (!lookup("f" + std::to_string(n), n, &call) || !call.once()) {
    state.SkipWithError("cannot call the eager function");
    return;
  }
  // A compiled call reinstalls the hook (install_frame_hook is idempotent),
  // so removing it here cannot change the other benchmarks.
  interpreter::uninstall_frame_hook();
  call_loop(state, call);
  interpreter::install_frame_hook();
}

void BM_Call_Compiled(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call call;
  if (!lookup("compiled_f" + std::to_string(n), n, &call)) {
    state.SkipWithError("cannot find the compiled function");
    return;
  }
  // Warm: the first call traces, later ones must hit the cache.
  for (int i = 0; i < 3; ++i) {
    if (!call.once()) {
      state.SkipWithError("the compiled function raised");
      return;
    }
  }
  KilnStats before, after;
  if (!read_kiln_stats(&before) || !call.once() || !read_kiln_stats(&after)) {
    state.SkipWithError("cannot read kiln.stats()");
    return;
  }
  if (after.traces != before.traces || after.cache_hits != before.cache_hits + 1 ||
      after.eager_runs != before.eager_runs) {
    state.SkipWithError("warm compiled call was not a cache hit (traces or eager runs grew)");
    return;
  }
  if (!call_loop(state, call)) return;
  KilnStats end;
  if (!read_kiln_stats(&end)) {
    state.SkipWithError("cannot read kiln.stats()");
    return;
  }
  const int64_t hits = end.cache_hits - after.cache_hits;
  if (end.traces != after.traces || end.eager_runs != after.eager_runs ||
      end.cache_misses != after.cache_misses || hits != static_cast<int64_t>(state.iterations())) {
    state.SkipWithError("timed compiled calls were not all cache hits");
    return;
  }
  state.counters["hits_per_call"] =
      static_cast<double>(hits) / static_cast<double>(state.iterations());
}

// Registered pairwise so each compiled run follows its eager twin.
BENCHMARK(BM_Call_Eager)->Arg(1)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Compiled)->Arg(1)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Eager)->Arg(8)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Compiled)->Arg(8)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_EagerNoHook)->Arg(1)->Arg(8)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace kiln::bench
