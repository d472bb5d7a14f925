// Guard evaluation: GuardSet::check() on a frame of N tensor locals, the
// work the frame hook does before every reuse of a compiled graph. The set
// holds a GradMode guard and one TensorMatch per local, as a trace of
// `def f(x0, ..., xN-1)` over tensors produces.
//
//   BM_GuardCheck_Hit/N   every guard holds (the cost paid on every cached call)
//   BM_GuardCheck_Miss/N  the last tensor has other sizes, so check() walks all
//                         N locals and fails on the last (the cost of a miss
//                         before kiln tries the next entry or retraces)
//
// Counters: per_tensor is seconds per tensor input (so "25n" means 25 ns),
// guards is the number of guards in the set.

#include <Python.h>
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "benchmarks/bench_support.h"
#include "guards/guard_set.h"
#include "runtime/aten_bridge.h"

namespace kiln::bench {
namespace {

// Shape of every guarded tensor: 2-D, so each TensorMatch compares two sizes
// and two strides. The miss variant's last tensor is kRows x kMissCols.
constexpr int kRows = 4;
constexpr int kCols = 4;
constexpr int kMissCols = 5;

// torch.randn(rows, cols) through the C API; new reference or null.
PyObject* randn(int rows, int cols) {
  PyObject* torch = PyDict_GetItemString(namespace_dict(), "torch");  // borrowed
  if (torch == nullptr) return nullptr;
  PyObject* tensor = PyObject_CallMethod(torch, "randn", "ii", rows, cols);
  if (tensor == nullptr) PyErr_Print();
  return tensor;
}

// N tensors standing in for a frame's fast locals, and a GuardSet traced
// against tensors of kRows x kCols.
struct GuardedFrame {
  std::vector<PyObject*> locals;  // owned
  guards::GuardSet guards;
  guards::FrameView frame;

  ~GuardedFrame() {
    for (PyObject* local : locals) Py_XDECREF(local);
  }

  // False (with a message in *error) when a tensor cannot be made.
  bool build(int n, bool miss_on_last, std::string* error) {
    guards.add_grad_mode(runtime::grad_mode_enabled());
    for (int i = 0; i < n; ++i) {
      PyObject* traced = randn(kRows, kCols);
      if (traced == nullptr || !runtime::is_tensor(traced)) {
        Py_XDECREF(traced);
        *error = "torch.randn failed";
        return false;
      }
      graph::TensorMeta meta;
      runtime::read_tensor_meta(traced, &meta);
      const int source = guards.sources().local(i, "x" + std::to_string(i));
      guards.add_tensor_match(source, meta);
      if (miss_on_last && i == n - 1) {
        Py_DECREF(traced);
        traced = randn(kRows, kMissCols);
        if (traced == nullptr) {
          *error = "torch.randn failed";
          return false;
        }
      }
      locals.push_back(traced);
    }
    frame.localsplus = locals.data();
    return true;
  }
};

void run_guard_check(benchmark::State& state, bool miss) {
  const int n = static_cast<int>(state.range(0));
  GuardedFrame guarded;
  std::string error;
  if (!guarded.build(n, miss, &error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  guards::SourceValues values;
  const bool expected = !miss;
  if (guarded.guards.check(guarded.frame, values) != expected) {
    state.SkipWithError(miss ? "check() held on a frame it must reject"
                             : "check() failed on the frame it was built from");
    return;
  }
  KILN_BENCH_COLLECT_BEGIN();
  for (auto _ : state) {
    bool held = guarded.guards.check(guarded.frame, values);
    benchmark::DoNotOptimize(held);
  }
  KILN_BENCH_COLLECT_END(state);
  values.reset(0);
  state.counters["guards"] = guarded.guards.guard_count();
  state.counters["per_tensor"] =
      benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_GuardCheck_Hit(benchmark::State& state) { run_guard_check(state, false); }
void BM_GuardCheck_Miss(benchmark::State& state) { run_guard_check(state, true); }

BENCHMARK(BM_GuardCheck_Hit)->Arg(1)->Arg(8)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_GuardCheck_Miss)->Arg(1)->Arg(8)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace kiln::bench
