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
//   BM_Call_Eager/N        f1 or f8 itself, plain CPython (kiln's frame hook is
//                          installed only during compiled calls)
//   BM_Call_Compiled/N     compiled_f1 or compiled_f8, warmed so every call is
//                          a cache hit (guards + graph replay, bytecode skipped)
//   BM_Call_Paired/N       one eager then one compiled call per iteration, each
//                          timed with steady_clock; counters eager_ns and
//                          compiled_ns are the medians of the calls, added_ns
//                          the median of per-iteration differences. Pairing
//                          the calls microseconds apart makes the difference
//                          robust to load from other processes, which shifts
//                          separate benchmarks run seconds apart by more than
//                          the overhead itself on a shared 2-core machine.
//
// main() prints compiled minus eager ("added ns per call") at the end. The
// compiled benchmarks check kiln.stats() before and after their loops and fail
// (SkipWithError) unless every call was a cache hit with no new trace and no
// eager fallback: they must never silently time the eager path.

#include <Python.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
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

double median(std::vector<int64_t>& samples) {
  if (samples.empty()) return 0;
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  return static_cast<double>(samples[mid]);
}

// The timed loop, shared so every variant runs exactly the same code.
bool call_loop(benchmark::State& state, const Call& call) {
  PyObject* fn = call.fn;
  PyObject* const* args = call.args.data();
  const size_t nargs = call.args.size();
  KILN_BENCH_COLLECT_BEGIN();
  for (auto _ : state) {
    PyObject* result = PyObject_Vectorcall(fn, args, nargs, nullptr);
    if (result == nullptr) {
      KILN_BENCH_COLLECT_END(state);
      PyErr_Print();
      state.SkipWithError("the call raised");
      return false;
    }
    Py_DECREF(result);
  }
  KILN_BENCH_COLLECT_END(state);
  return true;
}

void BM_Call_Eager(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call call;
  if (!lookup("f" + std::to_string(n), n, &call) || !call.once()) {
    state.SkipWithError("cannot call the eager function");
    return;
  }
  // kiln's frame hook is installed only during compiled calls (Note [Hook
  // lifetime]), so this is plain CPython.
  call_loop(state, call);
}

// Warms `compiled` until its calls hit kiln's cache and snapshots the
// counters into *start. False (and the benchmark skipped) otherwise.
bool warm_compiled(benchmark::State& state, const Call& compiled, KilnStats* start) {
  // The first call traces; later ones must hit the cache.
  for (int i = 0; i < 3; ++i) {
    if (!compiled.once()) {
      state.SkipWithError("the compiled function raised");
      return false;
    }
  }
  KilnStats before;
  if (!read_kiln_stats(&before) || !compiled.once() || !read_kiln_stats(start)) {
    state.SkipWithError("cannot read kiln.stats()");
    return false;
  }
  if (start->traces != before.traces || start->cache_hits != before.cache_hits + 1 ||
      start->eager_runs != before.eager_runs) {
    state.SkipWithError("warm compiled call was not a cache hit (traces or eager runs grew)");
    return false;
  }
  return true;
}

// After the loop: every timed compiled call must have been a cache hit.
void verify_all_hits(benchmark::State& state, const KilnStats& start) {
  KilnStats end;
  if (!read_kiln_stats(&end)) {
    state.SkipWithError("cannot read kiln.stats()");
    return;
  }
  const int64_t hits = end.cache_hits - start.cache_hits;
  if (end.traces != start.traces || end.eager_runs != start.eager_runs ||
      end.cache_misses != start.cache_misses || hits != static_cast<int64_t>(state.iterations())) {
    state.SkipWithError("timed compiled calls were not all cache hits");
    return;
  }
  state.counters["hits_per_call"] =
      static_cast<double>(hits) / static_cast<double>(state.iterations());
}

void BM_Call_Compiled(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call call;
  KilnStats start;
  if (!lookup("compiled_f" + std::to_string(n), n, &call)) {
    state.SkipWithError("cannot find the compiled function");
    return;
  }
  if (!warm_compiled(state, call, &start)) return;
  if (!call_loop(state, call)) return;
  verify_all_hits(state, start);
}

void BM_Call_Paired(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const int n = static_cast<int>(state.range(0));
  Call eager, compiled;
  KilnStats start;
  if (!lookup("f" + std::to_string(n), n, &eager) ||
      !lookup("compiled_f" + std::to_string(n), n, &compiled) || !eager.once()) {
    state.SkipWithError("cannot find or call the functions");
    return;
  }
  if (!warm_compiled(state, compiled, &start)) return;
  PyObject* const* args = eager.args.data();
  const size_t nargs = eager.args.size();
  std::vector<int64_t> eager_ns, compiled_ns, added_ns;
  eager_ns.reserve(state.max_iterations);
  compiled_ns.reserve(state.max_iterations);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    PyObject* r1 = PyObject_Vectorcall(eager.fn, args, nargs, nullptr);
    const auto t1 = Clock::now();
    PyObject* r2 = PyObject_Vectorcall(compiled.fn, args, nargs, nullptr);
    const auto t2 = Clock::now();
    if (r1 == nullptr || r2 == nullptr) {
      Py_XDECREF(r1);
      Py_XDECREF(r2);
      PyErr_Print();
      state.SkipWithError("the call raised");
      return;
    }
    Py_DECREF(r1);
    Py_DECREF(r2);
    eager_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    compiled_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count());
  }
  verify_all_hits(state, start);
  added_ns.resize(eager_ns.size());
  for (size_t i = 0; i < eager_ns.size(); ++i) added_ns[i] = compiled_ns[i] - eager_ns[i];
  // Medians: a call preempted by another process lands in the tail.
  state.counters["eager_ns"] = median(eager_ns);
  state.counters["compiled_ns"] = median(compiled_ns);
  state.counters["added_ns"] = median(added_ns);
}

BENCHMARK(BM_Call_Eager)->Arg(1)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Compiled)->Arg(1)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Eager)->Arg(8)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Compiled)->Arg(8)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_Call_Paired)->Arg(1)->Arg(8)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace kiln::bench
