// What the inductor kernel benchmarks share: the timed loops over
// call_cpu_kernel (preallocated outputs) and run_cpu_kernel (inputs bound,
// outputs allocated per call, as a graph runs).
#pragma once

#include <Python.h>
#include <benchmark/benchmark.h>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/kernel_ir.h"

namespace kiln::bench {

// Times run_cpu_kernel on state.range(0) threads; false (the benchmark
// marked as failed) when a call fails.
inline bool time_kernel_runs(benchmark::State& state, const inductor::cpu::CpuKernel& compiled,
                             const inductor::Kernel& kernel, PyObject* const* inputs) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    PyObject* result = inductor::cpu::run_cpu_kernel(compiled, kernel, inputs, threads);
    if (result == nullptr) {
      PyErr_Print();
      state.SkipWithError("run_cpu_kernel failed");
      return false;
    }
    Py_DECREF(result);
  }
  return true;
}

// Times call_cpu_kernel over preallocated `data` on state.range(0) threads.
inline void time_kernel_calls(benchmark::State& state, const inductor::cpu::CpuKernel& compiled,
                              const inductor::Kernel& kernel, char* const* data) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    inductor::cpu::call_cpu_kernel(compiled, kernel, data, threads);
    benchmark::ClobberMemory();
  }
}

}  // namespace kiln::bench
