// Tests of the CPU code generator (inductor/cpu/): prim graphs built with
// PrimBuilder over real tensors are fused, lowered, compiled with LLVM and
// run; results are compared with torch's own (sizes, strides, dtype, and
// values: bitwise where the op is exact, allclose with tight tolerances
// where kernels call other math functions than torch). Skipped in builds
// without LLVM.
#include <Python.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/cpu/llvm_jit.h"
#include "inductor/lower_pointwise.h"
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
    "torch.manual_seed(0)\n"
    "x = torch.randn(64, 33)\n"
    "y = torch.randn(64, 33)\n"
    "xt = torch.randn(33, 64).t()\n"
    "xd = torch.randn(64, 33, dtype=torch.float64)\n"
    "col = torch.randn(64, 1)\n"
    "row = torch.randn(1, 33)\n"
    "i = torch.randint(-50, 50, (64, 33))\n"
    "b = torch.rand(64, 33) > 0.5\n"
    "pos = torch.rand(64, 33) + 0.1\n"
    "xh = torch.randn(64, 33, dtype=torch.float16)\n"
    "xb = torch.randn(64, 33, dtype=torch.bfloat16)\n"
    "big = torch.randn(1000, 1003)\n"
    "empty = torch.randn(0, 5)\n"
    "s = torch.tensor(1.5)\n";

// Exactness of a comparison with torch.
struct Tolerance {
  double rtol = 0;  // 0 and atol 0: bitwise equal
  double atol = 0;
};

PyRef tensors() {
  // Leaked: a static PyRef would be released after Py_FinalizeEx.
  static PyRef* ns = new PyRef(test::exec_module(kTensors));
  return *ns;
}

// Builds a graph over the named tensors, fuses it (expecting one kernel),
// compiles and runs it, and compares with `torch_expr` evaluated over the
// same tensors.
void check(const std::vector<std::string>& names,
           const std::function<int(PrimBuilder&, const std::vector<int>&)>& build,
           const std::string& torch_expr, Tolerance tol = {}) {
  SCOPED_TRACE(torch_expr);
  PyRef ns = tensors();
  PrimGraph graph;
  PrimBuilder builder(graph);
  std::vector<int> values;
  std::vector<PyRef> inputs;
  for (const std::string& name : names) {
    inputs.push_back(test::item(ns, name.c_str()));
    graph::TensorMeta meta;
    runtime::read_tensor_meta(inputs.back().get(), &meta);
    values.push_back(graph.add_input(meta));
  }
  const int out = build(builder, values);
  graph.set_outputs({out});
  const auto groups = find_pointwise_groups(graph);
  ASSERT_EQ(groups.size(), 1u) << prims::format_prim_graph(graph);
  const LoweredKernel lowered = lower_pointwise(graph, groups[0]);
  ASSERT_EQ(lowered.outputs, std::vector<int>{out});
  CpuKernel compiled = compile_cpu_kernel(lowered.kernel);
  std::vector<PyObject*> bound;
  for (int value : lowered.inputs) {
    ASSERT_LT(value, static_cast<int>(inputs.size())) << "kernel input is not a graph input";
    bound.push_back(inputs[value].get());
  }
  PyRef result = PyRef::steal(run_cpu_kernel(compiled, lowered.kernel, bound.data()));
  ASSERT_TRUE(result) << test::take_error();
  PyRef actual = PyRef::steal(PySequence_GetItem(result.get(), 0));
  PyRef expected = PyRef::steal(PyRun_String(torch_expr.c_str(), Py_eval_input, ns.get(), ns.get()));
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
          ? "torch.equal(_actual, _expected) or (_actual.is_floating_point() and "
            "bool(((_actual == _expected) | (_actual.isnan() & _expected.isnan())).all()))"
          : "torch.allclose(_actual.double(), _expected.double(), rtol=" + std::to_string(tol.rtol) +
                ", atol=" + std::to_string(tol.atol) + ", equal_nan=True)";
  PyRef same = PyRef::steal(PyRun_String(compare.c_str(), Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(same) << test::take_error();
  if (same.get() != Py_True) {
    PyRef diff = PyRef::steal(PyRun_String(
        "float((_actual.double() - _expected.double()).abs().nan_to_num(0).max()) if _actual.numel() else 0.0",
        Py_eval_input, ns.get(), ns.get()));
    ADD_FAILURE() << "values differ; max abs difference "
                  << (diff ? PyFloat_AsDouble(diff.get()) : -1.0) << "\n"
                  << format_kernel(lowered.kernel);
  }
}

PrimArg v(int id) { return PrimArg::of_value(id); }
PrimArg f(double value) { return PrimArg::of_scalar(Scalar::of_float(value)); }
PrimArg n(int64_t value) { return PrimArg::of_scalar(Scalar::of_int(value)); }

// gelu(z), erf form, as torch's decomposition: z * 0.5 * (1 + erf(z / sqrt(2))).
int gelu(PrimBuilder& b, int z) {
  const int half = b.binary(Prim::Mul, v(z), f(0.5));
  const int e = b.unary(Prim::Erf, b.binary(Prim::Mul, v(z), f(0.7071067811865476)));
  return b.binary(Prim::Mul, v(half), v(b.binary(Prim::Add, v(e), f(1.0))));
}

TEST(CpuCodegen, GeluChain) {
  KILN_REQUIRE_LLVM();
  for (const char* pair : {"x,y", "big,big"}) {
    const std::string p = pair;
    const std::string a = p.substr(0, p.find(',')), c = p.substr(p.find(',') + 1);
    check({a, c},
          [](PrimBuilder& b, const std::vector<int>& in) {
            const int z = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(in[0]), v(in[1]))), f(1.0));
            return b.binary(Prim::Mul, v(gelu(b, z)), f(0.5));
          },
          "torch.nn.functional.gelu(" + a + " * " + c + " + 1) * 0.5", {1e-6, 1e-6});
  }
}

TEST(CpuCodegen, LeakyWhereIsExact) {
  KILN_REQUIRE_LLVM();
  check({"x"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int positive = b.binary(Prim::Gt, v(in[0]), n(0));
          return b.where(positive, v(in[0]), v(b.binary(Prim::Mul, v(in[0]), f(0.1))));
        },
        "torch.where(x > 0, x, 0.1 * x)");
}

TEST(CpuCodegen, ExpOfShifted) {
  KILN_REQUIRE_LLVM();
  check({"x", "row"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.unary(Prim::Exp, b.binary(Prim::Sub, v(in[0]), v(in[1])));
        },
        "torch.exp(x - row)", {1e-6, 0});
}

TEST(CpuCodegen, BroadcastColumnByRowIsExact) {
  KILN_REQUIRE_LLVM();
  check({"col", "row"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.binary(Prim::Sub, v(b.binary(Prim::Mul, v(in[0]), v(in[1]))), v(in[1]));
        },
        "col * row - row");
}

TEST(CpuCodegen, TransposedAndPermutedAreExact) {
  KILN_REQUIRE_LLVM();
  check({"xt", "x"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.binary(Prim::Maximum, v(in[0]), v(b.binary(Prim::Mul, v(in[1]), f(0.25))));
        },
        "torch.maximum(xt, x * 0.25)");
  // The output follows the transposed operand's layout when both are.
  check({"xt"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Add, v(in[0]), f(1)); },
        "xt + 1");
  // A permute of a computed value, and a reshape chain of an input.
  check({"x", "xt"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int t = b.permute(b.binary(Prim::Mul, v(in[0]), n(2)), {1, 0});
          return b.binary(Prim::Add, v(t), v(b.unsqueeze(b.squeeze(b.unsqueeze(in[1], 0), {0}), 2)));
        },
        "(x * 2).permute(1, 0) + xt.unsqueeze(2)");
}

TEST(CpuCodegen, MixedDtypesAndScalars) {
  KILN_REQUIRE_LLVM();
  // int64 * int scalar + float32 tensor -> float32.
  check({"x", "i"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.binary(Prim::Add, v(in[0]), v(b.binary(Prim::Mul, v(in[1]), n(3))));
        },
        "x + i * 3");
  // float32 with float64 -> float64; int true division -> float32.
  check({"x", "xd"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Mul, v(in[0]), v(in[1])); },
        "x * xd");
  check({"i"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Div, v(in[0]), n(7)); },
        "i / 7");
  // int64 with a float scalar -> float32 (the default dtype).
  check({"i"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Mul, v(in[0]), f(0.5)); },
        "i * 0.5");
  // An explicit conversion inside the kernel.
  check({"x"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.convert(b.binary(Prim::Mul, v(in[0]), f(100)), graph::DType::Int32);
        },
        "(x * 100).to(torch.int32)");
}

TEST(CpuCodegen, IntegersAndBoolsAreExact) {
  KILN_REQUIRE_LLVM();
  check({"i", "b"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          const int big = b.binary(Prim::Gt, v(b.binary(Prim::Add, v(b.binary(Prim::Mul, v(in[0]), n(3))), n(1))), n(4));
          return b.binary(Prim::LogicalAnd, v(big), v(b.unary(Prim::LogicalNot, in[1])));
        },
        "((i * 3 + 1) > 4) & ~b");
  check({"b", "i"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.where(in[0], v(in[1]), v(b.binary(Prim::Minimum, v(b.unary(Prim::Neg, in[1])), n(7))));
        },
        "torch.where(b, i, torch.clamp(-i, max=7))");
  check({"i"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.binary(Prim::BitwiseXor, v(b.unary(Prim::Abs, in[0])), n(5));
        },
        "i.abs() ^ 5");
  check({"b"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Add, v(in[0]), v(in[0])); },
        "b + b");
}

TEST(CpuCodegen, LowPrecisionStorage) {
  KILN_REQUIRE_LLVM();
  // One op: computed in float32 and rounded once, as torch does.
  check({"xh"}, [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Add, v(in[0]), f(1)); },
        "xh + 1");
  check({"xb"}, [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Mul, v(in[0]), f(3)); },
        "xb * 3");
  check({"xb"}, [](PrimBuilder& b, const std::vector<int>& in) { return b.convert(in[0], graph::DType::Float32); },
        "xb.float()");
  check({"x"}, [](PrimBuilder& b, const std::vector<int>& in) { return b.convert(in[0], graph::DType::BFloat16); },
        "x.bfloat16()");
  // Chains keep float32 intermediates (torch rounds after each op, so the
  // reference computes in float32, then rounds).
  check({"xh"},
        [](PrimBuilder& b, const std::vector<int>& in) {
          return b.unary(Prim::Tanh, b.binary(Prim::Mul, v(in[0]), f(1.7)));
        },
        "torch.tanh((xh * 1.7).float()).half()", {1e-3, 1e-3});
}

TEST(CpuCodegen, EmptyAndZeroDim) {
  KILN_REQUIRE_LLVM();
  check({"empty"}, [](PrimBuilder& b, const std::vector<int>& in) { return b.unary(Prim::Exp, in[0]); },
        "torch.exp(empty)");
  check({"s", "x"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Mul, v(in[0]), v(in[1])); },
        "s * x");
  check({"s"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Add, v(in[0]), f(2)); },
        "s + 2");
}

// Every math function a kernel calls resolves and agrees with torch, in
// float32 and float64.
TEST(CpuCodegen, MathFunctions) {
  KILN_REQUIRE_LLVM();
  const std::vector<std::pair<Prim, const char*>> unary = {
      {Prim::Exp, "exp"},        {Prim::Exp2, "exp2"},     {Prim::Expm1, "expm1"},
      {Prim::Log, "log"},        {Prim::Log2, "log2"},     {Prim::Log1p, "log1p"},
      {Prim::Sqrt, "sqrt"},      {Prim::Rsqrt, "rsqrt"},   {Prim::Sin, "sin"},
      {Prim::Cos, "cos"},        {Prim::Tan, "tan"},       {Prim::Tanh, "tanh"},
      {Prim::Sigmoid, "sigmoid"}, {Prim::Erf, "erf"},      {Prim::Floor, "floor"},
      {Prim::Ceil, "ceil"},      {Prim::Round, "round"},   {Prim::Trunc, "trunc"},
      {Prim::Reciprocal, "reciprocal"}, {Prim::Abs, "abs"}, {Prim::Neg, "neg"},
      {Prim::IsNan, "isnan"}};
  for (const char* input : {"pos", "xd"}) {
    for (const auto& [prim, name] : unary) {
      const Prim p = prim;
      // xd has negative values: log's NaNs must match too.
      check({input}, [p](PrimBuilder& b, const std::vector<int>& in) { return b.unary(p, in[0]); },
            std::string("torch.") + name + "(" + input + ")", {2e-6, 1e-7});
    }
  }
  check({"pos", "x"},
        [](PrimBuilder& b, const std::vector<int>& in) { return b.binary(Prim::Pow, v(in[0]), v(in[1])); },
        "torch.pow(pos, x)", {2e-6, 1e-7});
  EXPECT_NE(jit_resolve_host_symbol("erff"), nullptr);
  EXPECT_NE(jit_resolve_host_symbol("expf"), nullptr);
}

// The gelu kernel's inner loop is vectorized, erf through libmvec.
TEST(CpuCodegen, InnerLoopVectorizes) {
  KILN_REQUIRE_LLVM();
  PrimGraph graph;
  PrimBuilder b(graph);
  graph::TensorMeta meta;
  meta.sizes = {1 << 20};
  meta.strides = {1};
  const int x = graph.add_input(meta), y = graph.add_input(meta);
  const int z = b.binary(Prim::Add, v(b.binary(Prim::Mul, v(x), v(y))), f(1.0));
  graph.set_outputs({b.binary(Prim::Mul, v(gelu(b, z)), f(0.5))});
  const LoweredKernel lowered = lower_pointwise(graph, find_pointwise_groups(graph).at(0));
  const CpuKernel compiled = compile_cpu_kernel(lowered.kernel, /*keep_ir=*/true);
  EXPECT_NE(compiled.optimized_llvm_ir.find("x float>"), std::string::npos) << compiled.optimized_llvm_ir;
  if (host_cpu().avx2 && jit_resolve_host_symbol("_ZGVdN8v_erff") != nullptr) {
    // Scalar calls compute lane 0 of the vector function (Note [Kernel math
    // functions]); the vectorized loop calls it on 8 lanes.
    EXPECT_NE(compiled.llvm_ir.find("call float @kiln.lane.erff"), std::string::npos) << compiled.llvm_ir;
    EXPECT_NE(compiled.optimized_llvm_ir.find("call <8 x float> @_ZGVdN8v_erff"), std::string::npos)
        << compiled.optimized_llvm_ir;
  } else {
    EXPECT_NE(compiled.llvm_ir.find("call float @erff"), std::string::npos) << compiled.llvm_ir;
  }
}

TEST(CpuCodegen, RunnerRejectsWrongInputs) {
  KILN_REQUIRE_LLVM();
  Kernel k;
  k.sizes = {4};
  k.add_output({graph::DType::Float32, {1}, k.load(k.add_input({graph::DType::Float32, {1}, 0}))});
  const CpuKernel compiled = compile_cpu_kernel(k);
  PyRef ints = test::eval("torch.arange(4)");
  PyObject* inputs[] = {ints.get()};
  EXPECT_EQ(run_cpu_kernel(compiled, k, inputs), nullptr);
  EXPECT_NE(test::take_error().find("must be a CPU float32 tensor"), std::string::npos);
}

TEST(CpuCodegen, UnavailableOrInvalidThrows) {
  Kernel k;  // no outputs: invalid
  k.sizes = {4};
  EXPECT_THROW(compile_cpu_kernel(k), CodegenError);
}

}  // namespace
}  // namespace kiln::inductor::cpu
