// kiln's generated GEMM kernels (inductor/cpu/gemm.h) against torch's
// matmul, side by side, on the GPT example's products and two squares:
//
//   BM_Gemm_Aten/<shape>/<threads>   torch.matmul(a, b) through Python (the
//                                    reference BLAS on this host), a fresh
//                                    output per call
//   BM_Gemm_Kiln/<shape>/<threads>   the generated kernel over the same
//                                    operands, output preallocated
//   BM_Gemm_KilnNode/<shape>/<threads>  the GEMM node's callable as a graph
//                                    calls it (policy "kiln": layout check,
//                                    fresh output, GIL released)
//
// Shapes are m x k x n (A is m x k); "at"/"bt" mark a transposed operand
// (read in place), "bmm" a batch. Counters: GFLOP/s (2 flops per
// multiply-add). Threads: torch.set_num_threads and kiln's pool alike.
// Skipped in builds without LLVM.
#include <Python.h>
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_support.h"
#include "inductor/cpu/gemm.h"
#include "inductor/gemm_nodes.h"
#include "runtime/aten_bridge.h"
#include "base/py_ref.h"

namespace kiln::bench {
namespace {

using base::PyRef;

struct Shape {
  const char* name;
  const char* a;  // Python expressions of the operands
  const char* b;
};

const Shape kShapes[] = {
    {"128x32x96", "torch.randn(128, 32)", "torch.randn(32, 96)"},
    {"128x32x96_bt", "torch.randn(128, 32)", "torch.randn(96, 32).t()"},
    {"128x32x32_bt", "torch.randn(128, 32)", "torch.randn(32, 32).t()"},
    {"128x32x128_bt", "torch.randn(128, 32)", "torch.randn(128, 32).t()"},
    {"128x128x32_bt", "torch.randn(128, 128)", "torch.randn(32, 128).t()"},
    {"128x96x32", "torch.randn(128, 96)", "torch.randn(96, 32)"},
    {"96x128x32_at", "torch.randn(128, 96).t()", "torch.randn(128, 32)"},
    {"bmm16_16x16x16", "torch.randn(16, 16, 16)", "torch.randn(16, 16, 16)"},
    {"bmm16_16x16x16_bt", "torch.randn(16, 16, 16)", "torch.randn(16, 16, 16).transpose(1, 2)"},
    {"256x256x256", "torch.randn(256, 256)", "torch.randn(256, 256)"},
    {"512x512x512", "torch.randn(512, 512)", "torch.randn(512, 512)"},
};

// One shape's operands, output, kernel and GEMM node, made once.
struct Setup {
  PyRef a, b, out, aten, node;
  inductor::cpu::GemmSpec spec;
  inductor::cpu::CpuKernel compiled;
  bool ok = false;

  explicit Setup(const Shape& shape) {
    PyRef seeded = PyRef::steal(eval("torch.manual_seed(0)"));
    a = PyRef::steal(eval(shape.a));
    b = PyRef::steal(eval(shape.b));
    if (!seeded || !a || !b) return;
    const std::string prefix = std::string("_gemm_") + shape.name;
    PyDict_SetItemString(namespace_dict(), (prefix + "_a").c_str(), a.get());
    PyDict_SetItemString(namespace_dict(), (prefix + "_b").c_str(), b.get());
    const std::string call = "torch.matmul(" + prefix + "_a, " + prefix + "_b)";
    aten = PyRef::steal(Py_CompileString(call.c_str(), "<bench>", Py_eval_input));
    out = PyRef::steal(eval(call.c_str()));
    if (!aten || !out) return;
    graph::TensorMeta am, bm;
    runtime::read_tensor_meta(a.get(), &am);
    runtime::read_tensor_meta(b.get(), &bm);
    const auto made = inductor::cpu::make_gemm_spec(am, bm);
    if (!made) return;
    spec = *made;
    compiled = inductor::cpu::compile_gemm_cached(spec);
    bool compiled_now = false;
    node = inductor::make_gemm_call(am, bm, inductor::MatmulPolicy::Kiln, false, &compiled_now);
    ok = static_cast<bool>(node);
  }
};

Setup* setup(benchmark::State& state, const Shape& shape) {
  if (!inductor::cpu::cpu_codegen_available()) {
    state.SkipWithError("kiln was built without LLVM (KILN_WITH_LLVM=OFF)");
    return nullptr;
  }
  static std::vector<std::unique_ptr<Setup>>* made = new std::vector<std::unique_ptr<Setup>>(std::size(kShapes));
  const size_t index = static_cast<size_t>(&shape - kShapes);
  if (!(*made)[index]) (*made)[index] = std::make_unique<Setup>(shape);
  Setup* s = (*made)[index].get();
  const std::string threads = "torch.set_num_threads(" + std::to_string(state.range(0)) + ")";
  PyRef done = PyRef::steal(eval(threads.c_str()));
  if (!s->ok || !done) {
    PyErr_Clear();
    state.SkipWithError("setting up the GEMM benchmark failed");
    return nullptr;
  }
  return s;
}

void set_flops(benchmark::State& state, const Setup& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(2 * inductor::cpu::gemm_flops(s.spec)) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

void aten(benchmark::State& state, const Shape& shape) {
  Setup* s = setup(state, shape);
  if (s == nullptr) return;
  for (auto _ : state) {
    PyObject* result = PyEval_EvalCode(s->aten.get(), namespace_dict(), namespace_dict());
    if (result == nullptr) {
      PyErr_Print();
      state.SkipWithError("torch raised");
      return;
    }
    Py_DECREF(result);
  }
  set_flops(state, *s);
}

void kiln_kernel(benchmark::State& state, const Shape& shape) {
  Setup* s = setup(state, shape);
  if (s == nullptr) return;
  const int threads = static_cast<int>(state.range(0));
  const char* a = runtime::tensor_data(s->a.get());
  const char* b = runtime::tensor_data(s->b.get());
  char* c = runtime::tensor_data(s->out.get());
  for (auto _ : state) {
    inductor::cpu::call_gemm(s->compiled, s->spec, a, b, c, threads);
    benchmark::ClobberMemory();
  }
  set_flops(state, *s);
}

void kiln_node(benchmark::State& state, const Shape& shape) {
  Setup* s = setup(state, shape);
  if (s == nullptr) return;
  PyObject* args[] = {s->a.get(), s->b.get()};
  for (auto _ : state) {
    PyObject* result = PyObject_Vectorcall(s->node.get(), args, 2, nullptr);
    if (result == nullptr) {
      PyErr_Print();
      state.SkipWithError("the GEMM node raised");
      return;
    }
    Py_DECREF(result);
  }
  set_flops(state, *s);
}

// Registers the three benchmarks per shape, on 1 thread (and 2 for the squares).
const bool registered = [] {
  for (const Shape& shape : kShapes) {
    const bool big = std::string(shape.name).rfind("256", 0) == 0 || std::string(shape.name).rfind("512", 0) == 0;
    for (auto [label, fn] : {std::pair{"BM_Gemm_Aten/", &aten}, std::pair{"BM_Gemm_Kiln/", &kiln_kernel},
                             std::pair{"BM_Gemm_KilnNode/", &kiln_node}}) {
      auto* bench = benchmark::RegisterBenchmark((std::string(label) + shape.name).c_str(),
                                                 [fn = fn, &shape](benchmark::State& state) { fn(state, shape); });
      bench->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
      if (big) bench->Arg(2);
    }
  }
  return true;
}();

}  // namespace
}  // namespace kiln::bench
