// softmax then layer_norm (with affine weight and bias) over the last dim
// of a 4096 x 4096 float32 matrix, on 1 and 2 threads (the argument;
// torch.set_num_threads and kiln's pool alike):
//
//   BM_SoftmaxLayerNorm_TorchEager   F.layer_norm(torch.softmax(x, -1), (4096,), w, b):
//                                    torch's fused softmax and layer_norm kernels,
//                                    two passes over memory, two fresh outputs
//   BM_SoftmaxLayerNorm_KilnKernel   the one persistent-row kernel kiln schedules
//                                    from the same prims (amax, sub, exp, sum,
//                                    div, var_mean, rsqrt, affine), output
//                                    preallocated
//   BM_SoftmaxLayerNorm_KilnRun      the same through run_cpu_kernel (allocates
//                                    its output with torch.empty_strided)
//
// x.sum() over 16M float32 and x.sum(1) over a [2, 8M] float32, on 1 and 2
// threads: reductions whose reduced range splits across threads (Note
// [Split reductions]):
//
//   BM_Sum_TorchEager / BM_RowSums_TorchEager    torch.sum(x) / x.sum(1)
//   BM_Sum_KilnKernel / BM_RowSums_KilnKernel    the kernel, output preallocated
//   BM_Sum_KilnRun / BM_RowSums_KilnRun          through run_cpu_kernel
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
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "base/py_ref.h"

namespace kiln::bench {
namespace {

using prims::Prim;
using prims::PrimArg;
using base::PyRef;

constexpr int64_t kRows = 4096, kCols = 4096;

// The tensors and the compiled kernel, made once.
struct SoftmaxLayerNormSetup {
  PyRef x, w, b, out, eager;  // eager: a code object evaluating the torch expression
  inductor::LoweredKernel lowered;
  inductor::cpu::CpuKernel compiled;
  bool ok = false;

  SoftmaxLayerNormSetup() {
    x = PyRef::steal(eval("torch.randn(4096, 4096)"));
    w = PyRef::steal(eval("torch.randn(4096)"));
    b = PyRef::steal(eval("torch.randn(4096)"));
    out = PyRef::steal(eval("torch.empty(4096, 4096)"));
    eager = PyRef::steal(Py_CompileString(
        "torch.nn.functional.layer_norm(torch.softmax(_sx, -1), (4096,), _sw, _sb)", "<bench>", Py_eval_input));
    if (!x || !w || !b || !out || !eager) return;
    PyDict_SetItemString(namespace_dict(), "_sx", x.get());
    PyDict_SetItemString(namespace_dict(), "_sw", w.get());
    PyDict_SetItemString(namespace_dict(), "_sb", b.get());
    prims::PrimGraph graph;
    prims::PrimBuilder pb(graph);
    graph::TensorMeta meta, vec;
    runtime::read_tensor_meta(x.get(), &meta);
    runtime::read_tensor_meta(w.get(), &vec);
    const int xv = graph.add_input(meta), wv = graph.add_input(vec), bv = graph.add_input(vec);
    auto v = PrimArg::of_value;
    // As prims/decompose_call.cpp and decompose_nn.cpp decompose them.
    const int max = pb.reduce(Prim::Amax, xv, {1}, true);
    const int e = pb.unary(Prim::Exp, pb.binary(Prim::Sub, v(xv), v(max)));
    const int y = pb.binary(Prim::Div, v(e), v(pb.reduce(Prim::Sum, e, {1}, true)));
    auto [var, mean] = pb.var_mean(y, {1}, 0, true);
    const int rstd = pb.unary(Prim::Rsqrt, pb.binary(Prim::Add, v(var), PrimArg::of_scalar(prims::Scalar::of_float(1e-5))));
    const int normed = pb.binary(Prim::Mul, v(pb.binary(Prim::Sub, v(y), v(mean))), v(rstd));
    graph.set_outputs({pb.binary(Prim::Add, v(pb.binary(Prim::Mul, v(normed), v(wv))), v(bv))});
    const auto groups = inductor::schedule_kernels(graph);
    if (groups.size() != 1) return;
    lowered = inductor::lower_group(graph, groups[0]);
    compiled = inductor::cpu::compile_cpu_kernel(lowered.kernel);
    ok = lowered.inputs == std::vector<int>{xv, wv, bv};
  }
};

SoftmaxLayerNormSetup* setup(benchmark::State& state) {
  if (!inductor::cpu::cpu_codegen_available()) {
    state.SkipWithError("kiln was built without LLVM (KILN_WITH_LLVM=OFF)");
    return nullptr;
  }
  static SoftmaxLayerNormSetup* made = new SoftmaxLayerNormSetup();  // kept: reused by every run
  if (!made->ok) state.SkipWithError("setting up the softmax/layer_norm benchmark failed (not one kernel?)");
  const std::string call = "torch.set_num_threads(" + std::to_string(state.range(0)) + ")";
  PyRef done = PyRef::steal(eval(call.c_str()));
  if (!done) {
    PyErr_Clear();
    state.SkipWithError("torch.set_num_threads failed");
    return nullptr;
  }
  return made->ok ? made : nullptr;
}

void set_bytes(benchmark::State& state) {
  // What one fused pass moves: the matrix read, the result written.
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 2 * 4);
}

void BM_SoftmaxLayerNorm_TorchEager(benchmark::State& state) {
  SoftmaxLayerNormSetup* s = setup(state);
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

void BM_SoftmaxLayerNorm_KilnKernel(benchmark::State& state) {
  SoftmaxLayerNormSetup* s = setup(state);
  if (s == nullptr) return;
  char* data[] = {runtime::tensor_data(s->x.get()), runtime::tensor_data(s->w.get()),
                  runtime::tensor_data(s->b.get()), runtime::tensor_data(s->out.get())};
  time_kernel_calls(state, s->compiled, s->lowered.kernel, data);
  set_bytes(state);
}

void BM_SoftmaxLayerNorm_KilnRun(benchmark::State& state) {
  SoftmaxLayerNormSetup* s = setup(state);
  if (s == nullptr) return;
  PyObject* inputs[] = {s->x.get(), s->w.get(), s->b.get()};
  if (!time_kernel_runs(state, s->compiled, s->lowered.kernel, inputs)) return;
  set_bytes(state);
}

// One sum over a fresh float32 tensor of `sizes` and its compiled kernel,
// made once per shape.
struct SumSetup {
  PyRef x, out, eager;
  inductor::LoweredKernel lowered;
  inductor::cpu::CpuKernel compiled;
  bool ok = false;

  // dims: the reduced dims (empty: all); x_name: the tensor's name in the
  // benchmark namespace; expression: the eager torch call over it.
  SumSetup(const char* make, const char* x_name, std::vector<int64_t> dims, const char* expression) {
    x = PyRef::steal(eval(make));
    eager = PyRef::steal(Py_CompileString(expression, "<bench>", Py_eval_input));
    if (!x || !eager) return;
    PyDict_SetItemString(namespace_dict(), x_name, x.get());
    out = PyRef::steal(PyEval_EvalCode(eager.get(), namespace_dict(), namespace_dict()));
    if (!out) return;
    prims::PrimGraph graph;
    prims::PrimBuilder pb(graph);
    graph::TensorMeta meta;
    runtime::read_tensor_meta(x.get(), &meta);
    const int xv = graph.add_input(meta);
    graph.set_outputs({pb.reduce(Prim::Sum, xv, dims, false)});
    const auto groups = inductor::schedule_kernels(graph);
    if (groups.size() != 1) return;
    lowered = inductor::lower_group(graph, groups[0]);
    compiled = inductor::cpu::compile_cpu_kernel(lowered.kernel);
    ok = lowered.inputs == std::vector<int>{xv};
  }
};

// The setup for a benchmark (`full`: x.sum() over 16M, else x.sum(1) over
// [2, 8M]) with torch set to state.range(0) threads, or null (skipped).
SumSetup* sum_setup(benchmark::State& state, bool full) {
  if (!inductor::cpu::cpu_codegen_available()) {
    state.SkipWithError("kiln was built without LLVM (KILN_WITH_LLVM=OFF)");
    return nullptr;
  }
  static SumSetup* all = new SumSetup("torch.randn(16 * 1024 * 1024)", "_ux", {}, "torch.sum(_ux)");
  static SumSetup* rows = new SumSetup("torch.randn(2, 8 * 1024 * 1024)", "_rx", {1}, "_rx.sum(1)");
  SumSetup* made = full ? all : rows;
  if (!made->ok) {
    PyErr_Clear();
    state.SkipWithError("setting up the sum benchmark failed");
    return nullptr;
  }
  const std::string call = "torch.set_num_threads(" + std::to_string(state.range(0)) + ")";
  PyRef done = PyRef::steal(eval(call.c_str()));
  if (!done) {
    PyErr_Clear();
    state.SkipWithError("torch.set_num_threads failed");
    return nullptr;
  }
  return made;
}

void sum_eager(benchmark::State& state, bool full) {
  SumSetup* s = sum_setup(state, full);
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
  state.SetBytesProcessed(state.iterations() * 16 * 1024 * 1024 * 4);
}

void sum_kernel(benchmark::State& state, bool full) {
  SumSetup* s = sum_setup(state, full);
  if (s == nullptr) return;
  char* data[] = {runtime::tensor_data(s->x.get()), runtime::tensor_data(s->out.get())};
  time_kernel_calls(state, s->compiled, s->lowered.kernel, data);
  state.SetBytesProcessed(state.iterations() * 16 * 1024 * 1024 * 4);
}

void sum_run(benchmark::State& state, bool full) {
  SumSetup* s = sum_setup(state, full);
  if (s == nullptr) return;
  PyObject* inputs[] = {s->x.get()};
  if (!time_kernel_runs(state, s->compiled, s->lowered.kernel, inputs)) return;
  state.SetBytesProcessed(state.iterations() * 16 * 1024 * 1024 * 4);
}

void BM_Sum_TorchEager(benchmark::State& state) { sum_eager(state, true); }
void BM_Sum_KilnKernel(benchmark::State& state) { sum_kernel(state, true); }
void BM_Sum_KilnRun(benchmark::State& state) { sum_run(state, true); }
void BM_RowSums_TorchEager(benchmark::State& state) { sum_eager(state, false); }
void BM_RowSums_KilnKernel(benchmark::State& state) { sum_kernel(state, false); }
void BM_RowSums_KilnRun(benchmark::State& state) { sum_run(state, false); }

BENCHMARK(BM_SoftmaxLayerNorm_TorchEager)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SoftmaxLayerNorm_KilnKernel)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SoftmaxLayerNorm_KilnRun)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_Sum_TorchEager)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Sum_KilnKernel)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Sum_KilnRun)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RowSums_TorchEager)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RowSums_KilnKernel)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RowSums_KilnRun)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kiln::bench
