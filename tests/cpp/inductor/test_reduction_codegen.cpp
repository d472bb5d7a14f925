// Tests of reduction kernels (kernel_ir Reduce, lower_group, schedule,
// llvm_codegen's row and tile modes, the thread pool): prim graphs over
// real tensors are scheduled, lowered, compiled and run, and every output
// is compared with torch's result (sizes, strides, dtype, values: exact for
// integers, allclose for floats, whose sums kernels reassociate). Skipped
// in builds without LLVM.
#include <Python.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/reduction_split.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/inductor/cpu_test_util.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::inductor::cpu {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;
using test::PyRef;


constexpr const char* kTensors =
    "import torch\n"
    "torch.manual_seed(1)\n"
    "f32 = torch.randn(37, 45)\n"
    "f64 = torch.randn(37, 45, dtype=torch.float64)\n"
    "i32 = torch.randint(-5, 6, (37, 45), dtype=torch.int32)\n"
    "i64 = torch.randint(-5, 6, (37, 45))\n"
    "b8 = torch.rand(37, 45) > 0.3\n"
    "u8 = torch.randint(0, 255, (37, 45), dtype=torch.uint8)\n"
    "h16 = torch.randn(37, 45, dtype=torch.float16)\n"
    "cube = torch.randn(6, 7, 9)\n"
    "ft = torch.randn(45, 37).t()\n"
    "row = torch.randn(45)\n"
    "nan = torch.randn(5, 9)\n"
    "nan[1, 3] = float('nan')\n"
    "nan[4, 0] = float('nan')\n"
    "one = torch.randn(1, 1)\n"
    "seven = torch.randn(7)\n"
    "long = torch.randn(1000003)\n"
    "wide = torch.randn(3, 1000003)\n"
    "big = torch.randn(300, 257)\n"
    "empty = torch.randn(5, 0)\n"
    // Split reductions (Note [Split reductions]): few kept points, long rows.
    "huge = torch.randn(1 << 20)\n"
    "hnan = torch.randn(1 << 20)\n"
    "hnan[777777] = float('nan')\n"
    "hnan[900001] = float('nan')\n"
    "hf64 = torch.randn(1 << 18, dtype=torch.float64)\n"
    "near1 = 1 + torch.randn(1 << 18, dtype=torch.float64) * 1e-3\n"
    "hi32 = torch.randint(-5, 6, (1 << 18,), dtype=torch.int32)\n"
    "hb8 = torch.rand(1 << 18) > 0.5\n"
    "pair = torch.randn(2, 300007)\n"
    "pnan = torch.randn(2, 300007)\n"
    "pnan[1, 5] = float('nan')\n"
    "sliced = torch.randn(300, 1000)[:, :999]\n"
    "tall = torch.randn(300007, 3)\n"
    "tnan = torch.randn(300007, 3)\n"
    "tnan[200000, 1] = tnan[250000, 1] = float('nan')\n"
    // argmax/argmin: ties, NaN (first NaN wins), infinities.
    "ties = torch.randint(0, 3, (37, 45), dtype=torch.int32)\n"
    "fties = ties.float()\n"
    "tties = ties.t()\n"
    "nans2 = torch.randn(3, 8)\n"
    "nans2[0, 2] = nans2[0, 5] = nans2[1, 2] = nans2[2, 7] = float('nan')\n"
    "ninf = torch.full((4, 6), float('-inf'))\n"
    "pinf = torch.full((4, 6), float('inf'))\n";

PyRef tensors() {
  static PyRef* ns = new PyRef(test::exec_module(kTensors));  // leaked: outlives Py_FinalizeEx
  return *ns;
}

PrimArg v(int id) { return PrimArg::of_value(id); }
PrimArg f(double value) { return PrimArg::of_scalar(Scalar::of_float(value)); }

struct Tolerance {
  double rtol = 0;  // 0 and atol 0: exact
  double atol = 0;
};

// A tolerance as Python reads it (std::to_string would print 1e-10 as 0.000000).
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// Builds a graph over the named tensors whose outputs `build` returns,
// schedules it (expecting `kernels` groups, all lowered and run in graph
// order, their outputs standing in for the graph's values), and compares
// each graph output with the matching torch expression.
void check(const std::vector<std::string>& names,
           const std::function<std::vector<int>(PrimBuilder&, const std::vector<int>&)>& build,
           const std::vector<std::string>& torch_exprs, Tolerance tol = {}, size_t kernels = 1,
           int threads = 2) {
  SCOPED_TRACE(torch_exprs.front());
  PyRef ns = tensors();
  PrimGraph graph;
  PrimBuilder builder(graph);
  std::vector<PyRef> values;  // by prim value id, as computed
  for (const std::string& name : names) {
    values.push_back(test::item(ns, name.c_str()));
    graph::TensorMeta meta;
    runtime::read_tensor_meta(values.back().get(), &meta);
    graph.add_input(meta);
  }
  const std::vector<int> outs = build(builder, std::vector<int>(
      [&] { std::vector<int> ids; for (size_t i = 0; i < names.size(); ++i) ids.push_back(static_cast<int>(i)); return ids; }()));
  graph.set_outputs(outs);
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), kernels) << prims::format_prim_graph(graph) << [&] {
    std::string text = "groups:";
    for (const KernelGroup& group : groups) {
      text += " {";
      for (int n : group.nodes) text += " " + std::to_string(n);
      text += " }";
    }
    return text;
  }();
  values.resize(graph.values().size());
  for (const KernelGroup& group : groups) {
    const LoweredKernel lowered = lower_group(graph, group);
    const CpuKernel compiled = compile_cpu_kernel(lowered.kernel);
    std::vector<PyObject*> bound;
    for (int value : lowered.inputs) {
      ASSERT_TRUE(values[value]) << "kernel input %" << value << " is not computed";
      bound.push_back(values[value].get());
    }
    PyRef result = PyRef::steal(run_cpu_kernel(compiled, lowered.kernel, bound.data(), threads));
    ASSERT_TRUE(result) << test::take_error() << "\n" << format_kernel(lowered.kernel);
    for (size_t i = 0; i < lowered.outputs.size(); ++i) {
      values[lowered.outputs[i]] = PyRef::steal(PySequence_GetItem(result.get(), static_cast<Py_ssize_t>(i)));
    }
    SCOPED_TRACE(format_kernel(lowered.kernel));
  }
  ASSERT_EQ(outs.size(), torch_exprs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    SCOPED_TRACE(torch_exprs[i]);
    PyRef actual = values[outs[i]];
    ASSERT_TRUE(actual) << "output %" << outs[i] << " was not computed by a kernel";
    PyRef expected = PyRef::steal(PyRun_String(torch_exprs[i].c_str(), Py_eval_input, ns.get(), ns.get()));
    ASSERT_TRUE(expected) << test::take_error();
    graph::TensorMeta a, e;
    runtime::read_tensor_meta(actual.get(), &a);
    runtime::read_tensor_meta(expected.get(), &e);
    EXPECT_EQ(graph::format_tensor_meta(a), graph::format_tensor_meta(e));
    EXPECT_EQ(a.strides, e.strides);
    PyDict_SetItemString(ns.get(), "_actual", actual.get());
    PyDict_SetItemString(ns.get(), "_expected", expected.get());
    const std::string compare =
        tol.rtol == 0 && tol.atol == 0
            ? "torch.equal(_actual, _expected)"
            : "torch.allclose(_actual.double(), _expected.double(), rtol=" + number(tol.rtol) +
                  ", atol=" + number(tol.atol) + ", equal_nan=True)";
    PyRef same = PyRef::steal(PyRun_String(compare.c_str(), Py_eval_input, ns.get(), ns.get()));
    ASSERT_TRUE(same) << test::take_error();
    if (same.get() != Py_True) {
      PyRef diff = PyRef::steal(PyRun_String(
          "float((_actual.double() - _expected.double()).abs().nan_to_num(0).max()) if _actual.numel() else 0.0",
          Py_eval_input, ns.get(), ns.get()));
      ADD_FAILURE() << "values differ; max abs difference " << (diff ? PyFloat_AsDouble(diff.get()) : -1.0);
    }
  }
}

const char* torch_name(Prim prim) {
  switch (prim) {
    case Prim::Sum: return "sum";
    case Prim::Prod: return "prod";
    case Prim::Amax: return "amax";
    default: return "amin";
  }
}

// Every reduction kind x dtype x inner/outer dim x keepdim.
TEST(ReductionCodegen, EveryKindDtypeDimAndKeepdim) {
  KILN_REQUIRE_LLVM();
  for (Prim prim : {Prim::Sum, Prim::Prod, Prim::Amax, Prim::Amin}) {
    for (const char* input : {"f32", "f64", "i32", "i64", "b8", "u8", "h16"}) {
      const std::string name = input;
      for (int64_t dim : {1, 0}) {
        for (bool keepdim : {false, true}) {
          // float sums reassociate; products of 37-45 values compound rounding.
          const bool floating = name[0] == 'f' || name[0] == 'h';
          const Tolerance tol = !floating ? Tolerance{} : name == "h16" ? Tolerance{1e-2, 1e-2} : Tolerance{1e-5, 1e-5};
          check({name},
                [&](PrimBuilder& b, const std::vector<int>& in) {
                  return std::vector<int>{b.reduce(prim, in[0], {dim}, keepdim)};
                },
                {std::string("torch.") + torch_name(prim) + "(" + name + ", " + std::to_string(dim) +
                 (prim == Prim::Sum || prim == Prim::Prod ? "" : "") + ", keepdim=" + (keepdim ? "True" : "False") + ")"},
                tol);
        }
      }
    }
  }
}

TEST(ReductionCodegen, AllDimsMiddleDimAndOddSizes) {
  KILN_REQUIRE_LLVM();
  const Tolerance tol{1e-5, 1e-5};
  check({"cube"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Sum, in[0], {1}, false)}; },
        {"cube.sum(1)"}, tol);
  // Rows of a 3-d tensor: the kept dims coalesce into one.
  check({"cube"}, [](PrimBuilder& b, const std::vector<int>& in) {
          const int s = b.reduce(Prim::Sum, in[0], {2}, true);
          return std::vector<int>{s, b.binary(Prim::Sub, v(in[0]), v(s))}; },
        {"cube.sum(2, keepdim=True)", "cube - cube.sum(2, keepdim=True)"}, tol);
  check({"cube"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Amax, in[0], {0, 2}, true)}; },
        {"cube.amax((0, 2), keepdim=True)"}, tol);
  check({"cube"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Sum, in[0], {}, false)}; },
        {"cube.sum()"}, tol);
  check({"one"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Prod, in[0], {1}, false)}; },
        {"one.prod(1)"}, tol);
  check({"seven"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Amin, in[0], {0}, false)}; },
        {"seven.amin(0)"}, tol);
  // 1000003 floats summed in float32: lanes reassociate, torch sums in a
  // cascade; both are within a few ulps of the float64 sum times sqrt(n).
  check({"long"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)}; },
        {"long.sum()"}, {1e-4, 1e-2});
  check({"wide"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Amax, in[0], {1}, true)}; },
        {"wide.amax(1, keepdim=True)"});
  check({"wide"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)}; },
        {"wide.sum(0)"}, tol);
  // Sum with an output dtype, and of bools (counted in int64).
  check({"f32"}, [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.reduce(Prim::Sum, in[0], {1}, false, graph::DType::Float64)}; },
        {"f32.sum(1, dtype=torch.float64)"}, tol);
}

// Reducing an empty dim: each kept point stores the reduction of nothing
// (sum 0, prod 1, mean NaN) and what is computed from it, though the
// iteration space has no point (fuzzer seed 3210: 0.5 * x[x > 0].sum()).
TEST(ReductionCodegen, EmptyReducedDims) {
  KILN_REQUIRE_LLVM();
  const Tolerance tol{1e-6, 1e-6};
  check({"empty"}, [](PrimBuilder& b, const std::vector<int>& in) {
          return std::vector<int>{b.binary(Prim::Add, v(b.reduce(Prim::Sum, in[0], {1}, false)), f(0.5))}; },
        {"empty.sum(1) + 0.5"}, tol);
  check({"empty"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Prod, in[0], {0, 1}, false)}; },
        {"empty.prod()"}, tol);
  check({"empty"}, [](PrimBuilder& b, const std::vector<int>& in) {
          auto [var, mean] = b.var_mean(in[0], {1}, 1, true);
          return std::vector<int>{var, mean}; },
        {"torch.var_mean(empty, 1, keepdim=True)[0]", "torch.var_mean(empty, 1, keepdim=True)[1]"}, tol);
  // An empty kept dim: no output point, nothing stored.
  check({"empty"}, [](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(Prim::Sum, in[0], {0}, false)}; },
        {"empty.sum(0)"}, tol);
}

// amax and amin of one tensor: one kernel (horizontal fusion), two outputs.
TEST(ReductionCodegen, NanPropagatesThroughMaxAndMin) {
  KILN_REQUIRE_LLVM();
  for (int64_t dim : {0, 1}) {
    check({"nan"}, [&](PrimBuilder& b, const std::vector<int>& in) {
            return std::vector<int>{b.reduce(Prim::Amax, in[0], {dim}, false), b.reduce(Prim::Amin, in[0], {dim}, false)}; },
          {"nan.amax(" + std::to_string(dim) + ")", "nan.amin(" + std::to_string(dim) + ")"}, {1e-6, 0});
  }
}

TEST(ReductionCodegen, NonContiguousAndBroadcastInputs) {
  KILN_REQUIRE_LLVM();
  const Tolerance tol{1e-5, 1e-5};
  for (int64_t dim : {0, 1}) {
    check({"ft", "row"}, [&](PrimBuilder& b, const std::vector<int>& in) {
            return std::vector<int>{b.reduce(Prim::Sum, b.binary(Prim::Mul, v(in[0]), v(b.reshape(in[1], {1, 45}))) , {dim}, true)}; },
          {"(ft * row.reshape(1, 45)).sum(" + std::to_string(dim) + ", keepdim=True)"}, tol);
  }
}

// Pointwise work fuses into a reduction's input and its epilogue.
TEST(ReductionCodegen, PrologueAndEpilogueFuse) {
  KILN_REQUIRE_LLVM();
  const Tolerance tol{1e-5, 1e-6};
  // mean over rows and over columns: sum then divide, one kernel each.
  for (int64_t dim : {1, 0}) {
    check({"big"}, [&](PrimBuilder& b, const std::vector<int>& in) {
            const int s = b.reduce(Prim::Sum, b.unary(Prim::Exp, in[0]), {dim}, false);
            return std::vector<int>{b.binary(Prim::Div, v(b.unary(Prim::Log, s)), f(3.0))}; },
          {"big.exp().sum(" + std::to_string(dim) + ").log() / 3"}, tol);
  }
}

// softmax and log_softmax, as kiln decomposes them: one persistent-row kernel.
TEST(ReductionCodegen, SoftmaxIsOneKernel) {
  KILN_REQUIRE_LLVM();
  // cube: over its middle dim, a multi-phase tile-mode kernel.
  for (const char* input : {"big", "f64", "wide", "one", "ft", "cube"}) {
    for (bool log : {false, true}) {
      check({input}, [&](PrimBuilder& b, const std::vector<int>& in) {
              const int max = b.reduce(Prim::Amax, in[0], {1}, true);
              const int shifted = b.binary(Prim::Sub, v(in[0]), v(max));
              const int e = b.unary(Prim::Exp, shifted);
              const int total = b.reduce(Prim::Sum, e, {1}, true);
              return std::vector<int>{log ? b.binary(Prim::Sub, v(shifted), v(b.unary(Prim::Log, total)))
                                          : b.binary(Prim::Div, v(e), v(total))}; },
            {std::string(input) == "ft"
                 // Decomposed, the result keeps the transposed layout (TensorIterator's rule).
                 ? (log ? "(ft - ft.amax(1, keepdim=True)) - (ft - ft.amax(1, keepdim=True)).exp().sum(1, keepdim=True).log()"
                        : "(ft - ft.amax(1, keepdim=True)).exp() / (ft - ft.amax(1, keepdim=True)).exp().sum(1, keepdim=True)")
                 : std::string("torch.") + (log ? "log_softmax(" : "softmax(") + input + ", 1)"},
            {1e-5, 1e-6});
    }
  }
}

// layer_norm (var_mean, normalize, affine) after a softmax, one kernel,
// returning the statistics too (what a training forward saves).
TEST(ReductionCodegen, SoftmaxThenLayerNormIsOneKernel) {
  KILN_REQUIRE_LLVM();
  for (const char* input : {"big", "wide", "f32"}) {
    const std::string x = input;
    check({input, "row"}, [&](PrimBuilder& b, const std::vector<int>& in) {
            const int64_t n = b.meta(in[0]).sizes[1];
            const int max = b.reduce(Prim::Amax, in[0], {1}, true);
            const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(in[0]), v(max)));
            const int y = b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {1}, true)));
            auto [var, mean] = b.var_mean(y, {1}, 0, true);
            const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), f(1e-5)));
            int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(y), v(mean))), v(rstd));
            if (n == 45) out = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(out), v(in[1]))), f(0.5));
            return std::vector<int>{out, mean, rstd}; },
          {std::string("torch.nn.functional.layer_norm(torch.softmax(") + input + ", 1), (" + input + ".shape[1],)" +
               (x == "f32" ? ", row, torch.full_like(row, 0.5))" : ")"),
           "torch.softmax(" + x + ", 1).mean(1, keepdim=True)",
           "(torch.softmax(" + x + ", 1).var(1, unbiased=False, keepdim=True) + 1e-5).rsqrt()"},
          {2e-4, 1e-5});
  }
}

TEST(ReductionCodegen, VarMeanOverOuterDimsWithCorrection) {
  KILN_REQUIRE_LLVM();
  check({"big"}, [](PrimBuilder& b, const std::vector<int>& in) {
          auto [var, mean] = b.var_mean(in[0], {0}, 1, false);
          return std::vector<int>{var, mean}; },
        {"big.var(0)", "big.mean(0)"}, {1e-5, 1e-6});
}

// The same kernel on 1 and 2 threads gives the same bits (ranges split the
// kept dims; each point's reduction runs on one thread in one order).
TEST(ReductionCodegen, ThreadsSplitKeptDimsOnly) {
  KILN_REQUIRE_LLVM();
  for (int threads : {1, 2, 3}) {
    for (int64_t dim : {0, 1}) {
      check({"wide"}, [&](PrimBuilder& b, const std::vector<int>& in) {
              return std::vector<int>{b.reduce(Prim::Sum, b.binary(Prim::Mul, v(in[0]), f(2.0)), {dim}, false)}; },
            {"(wide * 2).sum(" + std::to_string(dim) + ")"}, {1e-5, 1e-2}, 1, threads);
    }
  }
}

// Full reductions and a few long rows split their reduced range over
// threads (Note [Split reductions]): every kind and dtype, NaN, several
// reduced dims, and multi-phase kernels (var_mean, softmax) agree with torch.
TEST(ReductionCodegen, SplitReductionsAgreeWithTorch) {
  KILN_REQUIRE_LLVM();
  auto reduce = [](Prim prim, std::vector<int64_t> dims, bool keepdim = false) {
    return [=](PrimBuilder& b, const std::vector<int>& in) { return std::vector<int>{b.reduce(prim, in[0], dims, keepdim)}; };
  };
  const Tolerance sum_tol{1e-4, 1e-2};  // ~1M floats: lanes and chunks reassociate
  check({"huge"}, reduce(Prim::Sum, {}), {"huge.sum()"}, sum_tol);
  check({"huge"}, reduce(Prim::Amax, {0}), {"huge.amax(0)"});
  check({"huge"}, reduce(Prim::Amin, {}), {"huge.amin()"});
  check({"hnan"}, reduce(Prim::Amax, {}), {"hnan.amax()"}, {1e-6, 0});
  check({"hnan"}, reduce(Prim::Amin, {0}, true), {"hnan.amin(0, keepdim=True)"}, {1e-6, 0});
  check({"hf64"}, reduce(Prim::Sum, {}), {"hf64.sum()"}, {1e-12, 1e-12});
  check({"near1"}, reduce(Prim::Prod, {}), {"near1.prod()"}, {1e-12, 0});
  for (const char* op : {"sum", "amax", "amin"}) {
    const Prim prim = std::string(op) == "sum" ? Prim::Sum : std::string(op) == "amax" ? Prim::Amax : Prim::Amin;
    check({"hi32"}, reduce(prim, {}), {std::string("torch.") + op + "(hi32" + (prim == Prim::Sum ? ")" : ", 0)")});
    check({"hb8"}, reduce(prim, {}), {std::string("torch.") + op + "(hb8" + (prim == Prim::Sum ? ")" : ", 0)")});
  }
  check({"pair"}, reduce(Prim::Sum, {1}), {"pair.sum(1)"}, sum_tol);
  check({"pair"}, reduce(Prim::Amax, {1}, true), {"pair.amax(1, keepdim=True)"});
  check({"pnan"}, reduce(Prim::Amax, {1}), {"pnan.amax(1)"}, {1e-6, 0});
  check({"pnan"}, reduce(Prim::Amin, {1}), {"pnan.amin(1)"}, {1e-6, 0});
  // argmax/argmin: index and value partials; first occurrence, first NaN.
  for (const char* op : {"argmax", "argmin"}) {
    const Prim prim = std::string(op) == "argmax" ? Prim::Argmax : Prim::Argmin;
    for (const char* input : {"huge", "hnan", "hi32", "ties"}) {
      check({input}, reduce(prim, {}), {std::string("torch.") + op + "(" + input + ")"});
    }
    check({"pnan"}, reduce(prim, {1}), {std::string("torch.") + op + "(pnan, 1)"});
    check({"pair"}, reduce(prim, {1}, true), {std::string("torch.") + op + "(pair, 1, keepdim=True)"});
  }
  // Outer reductions over a few columns (tile mode): each lane a kept point.
  check({"tall"}, reduce(Prim::Sum, {0}), {"tall.sum(0)"}, sum_tol);
  check({"tall"}, reduce(Prim::Amax, {0}, true), {"tall.amax(0, keepdim=True)"});
  check({"tnan"}, reduce(Prim::Amin, {0}), {"tnan.amin(0)"}, {1e-6, 0});
  check({"tnan"}, reduce(Prim::Argmax, {0}), {"tnan.argmax(0)"});
  check({"tall"}, reduce(Prim::Argmin, {0}, true), {"tall.argmin(0, keepdim=True)"});
  check({"tall"}, [](PrimBuilder& b, const std::vector<int>& in) {
          auto [var, mean] = b.var_mean(in[0], {0}, 1, false);
          return std::vector<int>{var, mean}; },
        {"tall.var(0)", "tall.mean(0)"}, {1e-4, 1e-6});
  check({"tall"}, [](PrimBuilder& b, const std::vector<int>& in) {
          const int max = b.reduce(Prim::Amax, in[0], {0}, true);
          const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(in[0]), v(max)));
          return std::vector<int>{b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {0}, true)))}; },
        {"torch.softmax(tall, 0)"}, {1e-4, 1e-9});
  // Two reduced dims that cannot merge (a slice): the outer one splits.
  check({"sliced"}, reduce(Prim::Sum, {}), {"sliced.sum()"}, sum_tol);
  // Multi-phase: the mean before the squared deviations.
  check({"huge"}, [](PrimBuilder& b, const std::vector<int>& in) {
          auto [var, mean] = b.var_mean(in[0], {}, 1, false);
          return std::vector<int>{var, mean}; },
        {"huge.var()", "huge.mean()"}, {1e-4, 1e-6});
  // Stored outputs that vary along the split range: each chunk its own.
  check({"pair"}, [](PrimBuilder& b, const std::vector<int>& in) {
          const int s = b.reduce(Prim::Sum, in[0], {1}, true);
          return std::vector<int>{b.binary(Prim::Sub, v(in[0]), v(s)), s}; },
        {"pair - pair.sum(1, keepdim=True)", "pair.sum(1, keepdim=True)"}, {1e-4, 1e-2});
  for (const char* input : {"huge", "pair"}) {
    const int64_t dim = std::string(input) == "huge" ? 0 : 1;
    for (bool log : {false, true}) {
      check({input}, [&](PrimBuilder& b, const std::vector<int>& in) {
              const int max = b.reduce(Prim::Amax, in[0], {dim}, true);
              const int shifted = b.binary(Prim::Sub, v(in[0]), v(max));
              const int e = b.unary(Prim::Exp, shifted);
              const int total = b.reduce(Prim::Sum, e, {dim}, true);
              return std::vector<int>{log ? b.binary(Prim::Sub, v(shifted), v(b.unary(Prim::Log, total)))
                                          : b.binary(Prim::Div, v(e), v(total))}; },
            {std::string("torch.") + (log ? "log_softmax(" : "softmax(") + input + ", " + std::to_string(dim) + ")"},
            {1e-4, 1e-9});
    }
  }
}

// A split kernel's chunks depend on its sizes only and combine in one
// order: 1, 2, 3 and 4 threads give the same bits.
TEST(ReductionCodegen, SplitReductionsGiveTheSameBitsOnAnyThreadCount) {
  KILN_REQUIRE_LLVM();
  PyRef ns = tensors();
  for (const char* name : {"huge", "hnan", "pair", "tnan"}) {
    SCOPED_TRACE(name);
    PyRef x = test::item(ns, name);
    PrimGraph graph;
    PrimBuilder b(graph);
    graph::TensorMeta meta;
    runtime::read_tensor_meta(x.get(), &meta);
    const int in = graph.add_input(meta);
    const int64_t dim = std::string(name) == "tnan" ? 0 : static_cast<int64_t>(meta.sizes.size()) - 1;
    auto [var, mean] = b.var_mean(in, {dim}, 1, false);
    graph.set_outputs({var, mean, b.reduce(Prim::Amax, in, {dim}, false), b.reduce(Prim::Argmin, in, {dim}, false)});
    const auto groups = schedule_kernels(graph);
    ASSERT_EQ(groups.size(), 1u);
    const LoweredKernel lowered = lower_group(graph, groups[0]);
    ASSERT_GE(split_reduction(lowered.kernel).chunks, 2) << format_kernel(lowered.kernel);
    const CpuKernel compiled = compile_cpu_kernel(lowered.kernel, /*keep_ir=*/true);
    // Each chunk's partial sums still vectorize (row mode; tile lanes
    // accumulate in memory, one sequence each).
    if (tile_dim(lowered.kernel) < 0) {
      EXPECT_NE(compiled.optimized_llvm_ir.find("fadd reassoc <"), std::string::npos) << compiled.optimized_llvm_ir;
    }
    PyObject* inputs[] = {x.get()};
    PyRef first = PyRef::steal(run_cpu_kernel(compiled, lowered.kernel, inputs, 1));
    ASSERT_TRUE(first) << test::take_error();
    PyDict_SetItemString(ns.get(), "_first", first.get());
    for (int threads : {2, 3, 4}) {
      PyRef again = PyRef::steal(run_cpu_kernel(compiled, lowered.kernel, inputs, threads));
      ASSERT_TRUE(again) << test::take_error();
      PyDict_SetItemString(ns.get(), "_again", again.get());
      PyRef same = PyRef::steal(PyRun_String(
          "all(torch.equal(a.nan_to_num(0), b.nan_to_num(0)) and torch.equal(a.isnan(), b.isnan()) "
          "for a, b in zip(_first, _again))",
          Py_eval_input, ns.get(), ns.get()));
      ASSERT_TRUE(same) << test::take_error();
      EXPECT_EQ(same.get(), Py_True) << threads << " threads";
    }
  }
}

// argmax/argmin (Note [Arg reductions]): int64 indices of the first
// extreme, the first NaN winning; inner dims (row mode), outer dims (tile
// mode, over several 512-lane blocks), all dims of a transposed input
// (torch's flat index, not memory order), keepdim, every dtype.
TEST(ReductionCodegen, ArgmaxAndArgminMatchTorch) {
  KILN_REQUIRE_LLVM();
  for (Prim prim : {Prim::Argmax, Prim::Argmin}) {
    const std::string op = prim == Prim::Argmax ? "argmax" : "argmin";
    for (const char* input : {"f32", "f64", "i32", "i64", "u8", "h16", "ft", "cube", "ties", "fties", "tties",
                              "nan", "nans2", "ninf", "pinf", "wide"}) {
      for (int64_t dim : {0, 1, -1}) {
        for (bool keepdim : {false, true}) {
          if (dim == -1 && keepdim) continue;  // argmax(x, None, keepdim=True): no dim to keep
          const std::string dims = dim < 0 ? "None" : std::to_string(dim);
          check({input},
                [&](PrimBuilder& b, const std::vector<int>& in) {
                  return std::vector<int>{b.reduce(prim, in[0], dim < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim},
                                                   keepdim)};
                },
                {"torch." + op + "(" + input + ", " + dims + ", keepdim=" + (keepdim ? "True" : "False") + ")"});
        }
      }
    }
  }
}

// torch.max(x, dim): amax and argmax of one tensor, one kernel.
TEST(ReductionCodegen, MaxWithADimIsOneKernel) {
  KILN_REQUIRE_LLVM();
  for (int64_t dim : {0, 1}) {
    check({"nans2"}, [&](PrimBuilder& b, const std::vector<int>& in) {
            return std::vector<int>{b.reduce(Prim::Amax, in[0], {dim}, false), b.reduce(Prim::Argmax, in[0], {dim}, false)}; },
          {"torch.max(nans2, " + std::to_string(dim) + ").values", "torch.max(nans2, " + std::to_string(dim) + ").indices"},
          {1e-6, 0});
  }
}

}  // namespace
}  // namespace kiln::inductor::cpu
