// A fused pointwise kernel against torch eager, on 1 and 2 threads (the
// benchmark's argument; torch.set_num_threads and kiln's pool alike):
//
//   gelu(x * y + 1) * 0.5      (erf form), x and y 16M float32 (64 MiB each)
//
//   BM_Gelu_TorchEager    torch.nn.functional.gelu(x * y + 1) * 0.5, four ops,
//                         each a pass over memory with a fresh output
//   BM_Gelu_KilnKernel    the kernel kiln compiles from the same prims
//                         (lower_pointwise + LLVM), one pass, output preallocated
//   BM_Gelu_KilnRun       the kernel through run_cpu_kernel (allocates its output
//                         with torch.empty_strided, as eager does)
//
// x * y + 1 over two transposed 4096 x 4096 float32 views (x.t(), y.t();
// the result is transposed too, as TensorIterator lays it out), through
// the scheduler and lower_group as graphs run (Note [Loop order]):
//
//   BM_TransposedMulAdd_TorchEager   torch: two ops, each a pass in memory order
//   BM_TransposedMulAdd_KilnKernel   the one kernel, output preallocated
//   BM_TransposedMulAdd_KilnRun      the kernel through run_cpu_kernel (a fresh
//                                    output per call, as eager)
//
// Skipped in builds without LLVM.

#include <Python.h>
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "benchmarks/bench_support.h"
#include "benchmarks/kernel_bench_support.h"
#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/lower_group.h"
#include "inductor/lower_pointwise.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "base/py_ref.h"

namespace kiln::bench {
namespace {

using prims::Prim;
using prims::PrimArg;
using base::PyRef;

constexpr int64_t kElements = int64_t{1} << 24;

// The tensors and the compiled kernel, made once.
struct GeluSetup {
  PyRef x, y, out, eager;  // eager: a code object evaluating the torch expression
  inductor::LoweredKernel lowered;
  inductor::cpu::CpuKernel compiled;
  bool ok = false;

  GeluSetup() {
    PyRef threads = PyRef::steal(eval("torch.get_num_threads()"));
    x = PyRef::steal(eval("torch.randn(1 << 24)"));
    y = PyRef::steal(eval("torch.randn(1 << 24)"));
    out = PyRef::steal(eval("torch.empty(1 << 24)"));
    eager = PyRef::steal(Py_CompileString("torch.nn.functional.gelu(_x * _y + 1) * 0.5", "<bench>", Py_eval_input));
    if (!threads || !x || !y || !out || !eager) return;
    PyDict_SetItemString(namespace_dict(), "_x", x.get());
    PyDict_SetItemString(namespace_dict(), "_y", y.get());
    prims::PrimGraph graph;
    prims::PrimBuilder b(graph);
    graph::TensorMeta meta;
    runtime::read_tensor_meta(x.get(), &meta);
    const int xv = graph.add_input(meta), yv = graph.add_input(meta);
    auto v = PrimArg::of_value;
    auto f = [](double value) { return PrimArg::of_scalar(prims::Scalar::of_float(value)); };
    const int z = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(xv), v(yv))), f(1.0));
    const int half = b.binary(Prim::Mul, v(z), f(0.5));
    const int e = b.unary(Prim::Erf, b.binary(Prim::Mul, v(z), f(0.7071067811865476)));
    const int g = b.binary(Prim::Mul, v(half), v(b.binary(Prim::Add, v(e), f(1.0))));
    graph.set_outputs({b.binary(Prim::Mul, v(g), f(0.5))});
    lowered = inductor::lower_pointwise(graph, inductor::find_pointwise_groups(graph).at(0));
    compiled = inductor::cpu::compile_cpu_kernel(lowered.kernel);
    ok = true;
  }
};

GeluSetup* setup(benchmark::State& state) {
  if (!inductor::cpu::cpu_codegen_available()) {
    state.SkipWithError("kiln was built without LLVM (KILN_WITH_LLVM=OFF)");
    return nullptr;
  }
  static GeluSetup* made = new GeluSetup();  // kept: 192 MiB reused by every run
  if (!made->ok) state.SkipWithError("setting up the gelu benchmark failed");
  return made->ok ? made : nullptr;
}

void set_bytes(benchmark::State& state) {
  // What one fused pass moves: two inputs read, one output written.
  state.SetBytesProcessed(state.iterations() * kElements * 3 * 4);
}

// torch.set_num_threads(n); false (and the benchmark skipped) on failure.
bool set_threads(benchmark::State& state) {
  const std::string call = "torch.set_num_threads(" + std::to_string(state.range(0)) + ")";
  PyRef done = PyRef::steal(eval(call.c_str()));
  if (!done) {
    PyErr_Clear();
    state.SkipWithError("torch.set_num_threads failed");
  }
  return static_cast<bool>(done);
}

void BM_Gelu_TorchEager(benchmark::State& state) {
  GeluSetup* s = setup(state);
  if (s == nullptr || !set_threads(state)) return;
  for (auto _ : state) {
    PyObject* result = PyEval_EvalCode(s->eager.get(), namespace_dict(), namespace_dict());
    if (result == nullptr) {
      PyErr_Print();
      state.SkipWithError("torch raised");
      return;
    }
    Py_DECREF(result);
  }
  set_bytes(state);
}

void BM_Gelu_KilnKernel(benchmark::State& state) {
  GeluSetup* s = setup(state);
  if (s == nullptr) return;
  char* data[] = {runtime::tensor_data(s->x.get()), runtime::tensor_data(s->y.get()),
                  runtime::tensor_data(s->out.get())};
  time_kernel_calls(state, s->compiled, s->lowered.kernel, data);
  set_bytes(state);
}

void BM_Gelu_KilnRun(benchmark::State& state) {
  GeluSetup* s = setup(state);
  if (s == nullptr) return;
  PyObject* inputs[] = {s->x.get(), s->y.get()};
  if (!time_kernel_runs(state, s->compiled, s->lowered.kernel, inputs)) return;
  set_bytes(state);
}

// x.t() * y.t() + 1 and its kernel, made once.
struct TransposedSetup {
  PyRef x, y, out, eager;
  inductor::LoweredKernel lowered;
  inductor::cpu::CpuKernel compiled;
  bool ok = false;

  TransposedSetup() {
    x = PyRef::steal(eval("torch.randn(4096, 4096).t()"));
    y = PyRef::steal(eval("torch.randn(4096, 4096).t()"));
    eager = PyRef::steal(Py_CompileString("_tx * _ty + 1", "<bench>", Py_eval_input));
    if (!x || !y || !eager) return;
    PyDict_SetItemString(namespace_dict(), "_tx", x.get());
    PyDict_SetItemString(namespace_dict(), "_ty", y.get());
    out = PyRef::steal(PyEval_EvalCode(eager.get(), namespace_dict(), namespace_dict()));
    if (!out) return;
    prims::PrimGraph graph;
    prims::PrimBuilder b(graph);
    graph::TensorMeta xm, ym;
    runtime::read_tensor_meta(x.get(), &xm);
    runtime::read_tensor_meta(y.get(), &ym);
    const int xv = graph.add_input(xm), yv = graph.add_input(ym);
    auto v = PrimArg::of_value;
    graph.set_outputs({b.binary(Prim::Add, v(b.binary(Prim::Mul, v(xv), v(yv))),
                                PrimArg::of_scalar(prims::Scalar::of_float(1.0)))});
    const auto groups = inductor::schedule_kernels(graph);
    if (groups.size() != 1) return;
    lowered = inductor::lower_group(graph, groups[0]);
    compiled = inductor::cpu::compile_cpu_kernel(lowered.kernel);
    graph::TensorMeta om;
    runtime::read_tensor_meta(out.get(), &om);
    ok = lowered.inputs == std::vector<int>{xv, yv} && lowered.kernel.outputs[0].tensor_strides == om.strides;
  }
};

TransposedSetup* transposed_setup(benchmark::State& state) {
  if (!inductor::cpu::cpu_codegen_available()) {
    state.SkipWithError("kiln was built without LLVM (KILN_WITH_LLVM=OFF)");
    return nullptr;
  }
  static TransposedSetup* made = new TransposedSetup();  // kept: 192 MiB reused by every run
  if (!made->ok) {
    PyErr_Clear();
    state.SkipWithError("setting up the transposed benchmark failed");
    return nullptr;
  }
  return set_threads(state) ? made : nullptr;
}

void BM_TransposedMulAdd_TorchEager(benchmark::State& state) {
  TransposedSetup* s = transposed_setup(state);
  if (s == nullptr) return;
  for (auto _ : state) {
    PyObject* result = PyEval_EvalCode(s->eager.get(), namespace_dict(), namespace_dict());
    if (result == nullptr) {
      PyErr_Print();
      state.SkipWithError("torch raised");
      return;
    }
    Py_DECREF(result);
  }
  set_bytes(state);
}

void BM_TransposedMulAdd_KilnKernel(benchmark::State& state) {
  TransposedSetup* s = transposed_setup(state);
  if (s == nullptr) return;
  char* data[] = {runtime::tensor_data(s->x.get()), runtime::tensor_data(s->y.get()),
                  runtime::tensor_data(s->out.get())};
  time_kernel_calls(state, s->compiled, s->lowered.kernel, data);
  set_bytes(state);
}

void BM_TransposedMulAdd_KilnRun(benchmark::State& state) {
  TransposedSetup* s = transposed_setup(state);
  if (s == nullptr) return;
  PyObject* inputs[] = {s->x.get(), s->y.get()};
  if (!time_kernel_runs(state, s->compiled, s->lowered.kernel, inputs)) return;
  set_bytes(state);
}

BENCHMARK(BM_Gelu_TorchEager)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Gelu_KilnKernel)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Gelu_KilnRun)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_TransposedMulAdd_TorchEager)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TransposedMulAdd_KilnKernel)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TransposedMulAdd_KilnRun)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kiln::bench
