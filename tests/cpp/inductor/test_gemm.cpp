// Tests of the generated GEMM kernels (inductor/cpu/gemm.h, Note [GEMM
// kernels]): specs made from real tensors' layouts, kernels compiled with
// LLVM and run over those tensors, results compared with torch.matmul
// computed in float64, within a bound scaled by k and by |A| @ |B| (a
// kernel that reads a wrong element is off by about |A| @ |B|, far beyond
// it). Skipped in builds without LLVM.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "inductor/cpu/gemm.h"
#include "inductor/gemm_nodes.h"
#include "runtime/aten_bridge.h"
#include "tests/cpp/inductor/cpu_test_util.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::inductor::cpu {
namespace {

using test::PyRef;

// Globals of the comparisons.
PyRef scope() {
  // Leaked: a static PyRef would be released after Py_FinalizeEx.
  static PyRef* ns = new PyRef(test::exec_module(
      "import torch\n"
      "def within(actual, a, b):\n"
      "    exact = torch.matmul(a.double(), b.double())\n"
      "    scale = torch.matmul(a.double().abs(), b.double().abs())\n"
      "    eps = torch.finfo(a.dtype).eps\n"
      "    k = a.shape[-1]\n"
      "    bound = max(4 * k, 16) * eps * scale + 1e-300\n"
      "    return actual.shape == exact.shape and bool(((actual.double() - exact).abs() <= bound).all())\n"));
  return *ns;
}

// Evaluates `expression` in scope() with torch seeded.
PyRef make(const std::string& expression) {
  PyRef ns = scope();
  PyRef seeded = PyRef::steal(PyRun_String("torch.manual_seed(0)", Py_eval_input, ns.get(), ns.get()));
  EXPECT_TRUE(seeded) << test::take_error();
  PyRef value = PyRef::steal(PyRun_String(expression.c_str(), Py_eval_input, ns.get(), ns.get()));
  EXPECT_TRUE(value) << expression << ": " << test::take_error();
  return value;
}

graph::TensorMeta meta_of(const PyRef& tensor) {
  graph::TensorMeta meta;
  runtime::read_tensor_meta(tensor.get(), &meta);
  return meta;
}

// Runs the generated kernel for a @ b on `threads` threads; the result tensor.
// With `rows_at_run_time`, the kernel that reads m when called (Note
// [GEMM rows at run time]); *source says where the cache found it.
PyRef run_gemm(const PyRef& a, const PyRef& b, int threads, GemmSpec* spec_out = nullptr, bool rows_at_run_time = false,
               KernelSource* source = nullptr) {
  std::optional<GemmSpec> spec = make_gemm_spec(meta_of(a), meta_of(b));
  EXPECT_TRUE(spec.has_value());
  if (!spec) return PyRef();
  spec->rows_at_run_time = rows_at_run_time;
  if (spec_out) *spec_out = *spec;
  const CpuKernel compiled = compile_gemm_cached(*spec, source);
  PyRef ns = scope();
  PyDict_SetItemString(ns.get(), "_a", a.get());
  PyDict_SetItemString(ns.get(), "_b", b.get());
  // NaN-filled, so an element the kernel does not write fails the comparison.
  PyRef out = PyRef::steal(PyRun_String("torch.full(torch.matmul(_a, _b).shape, float('nan'), dtype=_a.dtype)",
                                        Py_eval_input, ns.get(), ns.get()));
  EXPECT_TRUE(out) << test::take_error();
  if (!out) return PyRef();
  call_gemm(compiled, *spec, runtime::tensor_data(a.get()), runtime::tensor_data(b.get()),
            runtime::tensor_data(out.get()), threads);
  return out;
}

// Checks the kernel for `a_expr` @ `b_expr` against torch, on 1 and 2
// threads (which must agree bit for bit).
void check(const std::string& a_expr, const std::string& b_expr, bool rows_at_run_time = false,
           KernelSource* source = nullptr) {
  SCOPED_TRACE(a_expr + " @ " + b_expr);
  PyRef a = make(a_expr), b = make(b_expr);
  ASSERT_TRUE(a && b);
  GemmSpec spec;
  PyRef one = run_gemm(a, b, 1, &spec, rows_at_run_time, source);
  PyRef two = run_gemm(a, b, 2, nullptr, rows_at_run_time);
  ASSERT_TRUE(one && two);
  PyRef ns = scope();
  PyDict_SetItemString(ns.get(), "_a", a.get());
  PyDict_SetItemString(ns.get(), "_b", b.get());
  PyDict_SetItemString(ns.get(), "_one", one.get());
  PyDict_SetItemString(ns.get(), "_two", two.get());
  PyRef ok = PyRef::steal(PyRun_String("within(_one, _a, _b)", Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(ok) << test::take_error();
  EXPECT_EQ(ok.get(), Py_True) << format_gemm_spec(spec);
  PyRef same = PyRef::steal(PyRun_String("torch.equal(_one, _two) or (_one.numel() > 0 and "
                                         "bool(((_one == _two) | (_one.isnan() & _two.isnan())).all()))",
                                         Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(same) << test::take_error();
  EXPECT_EQ(same.get(), Py_True) << "1 and 2 threads differ: " << format_gemm_spec(spec);
}

TEST(Gemm, SmallAndOddShapes) {
  KILN_REQUIRE_LLVM();
  for (const char* dims : {"1,1,1", "7,13,5", "33,17,65", "6,1,16", "5,1,3", "1,40,17", "17,40,1", "6,16,16",
                           "12,32,32", "13,31,33", "128,32,96", "128,128,32", "100,300,70"}) {
    int m = 0, k = 0, n = 0;
    ASSERT_EQ(std::sscanf(dims, "%d,%d,%d", &m, &k, &n), 3);
    const std::string a = "torch.randn(" + std::to_string(m) + ", " + std::to_string(k) + ")";
    const std::string b = "torch.randn(" + std::to_string(k) + ", " + std::to_string(n) + ")";
    check(a, b);
    check(a + ".double()", b + ".double()");
  }
}

TEST(Gemm, EmptyDimsGiveEmptyOrZeros) {
  KILN_REQUIRE_LLVM();
  check("torch.randn(0, 5)", "torch.randn(5, 7)");
  check("torch.randn(4, 5)", "torch.randn(5, 0)");
  // K = 0: every element is an empty sum.
  check("torch.randn(4, 0)", "torch.randn(0, 7)");
  check("torch.randn(33, 0).double()", "torch.randn(0, 17).double()");
  check("torch.randn(3, 0, 0)", "torch.randn(3, 0, 9)");
}

TEST(Gemm, TransposedOperands) {
  KILN_REQUIRE_LLVM();
  for (const char* dims : {"7,13,5", "33,17,65", "128,32,96", "96,128,32", "128,96,32", "300,257,40"}) {
    int m = 0, k = 0, n = 0;
    ASSERT_EQ(std::sscanf(dims, "%d,%d,%d", &m, &k, &n), 3);
    const std::string a = "torch.randn(" + std::to_string(m) + ", " + std::to_string(k) + ")";
    const std::string at = "torch.randn(" + std::to_string(k) + ", " + std::to_string(m) + ").t()";
    const std::string b = "torch.randn(" + std::to_string(k) + ", " + std::to_string(n) + ")";
    const std::string bt = "torch.randn(" + std::to_string(n) + ", " + std::to_string(k) + ").t()";
    check(at, b);
    check(a, bt);
    check(at, bt);
  }
}

TEST(Gemm, StridedAndSlicedOperands) {
  KILN_REQUIRE_LLVM();
  // Steps in both dims, offsets into the storage, a broadcast row.
  check("torch.randn(40, 60)[3::2, 1::3]", "torch.randn(30, 50)[5:25, ::2]");
  check("torch.randn(9, 1).expand(9, 11)", "torch.randn(11, 13)");
  check("torch.randn(7, 11)", "torch.randn(1, 13).expand(11, 13)");
}

TEST(Gemm, BatchedAndBroadcast) {
  KILN_REQUIRE_LLVM();
  check("torch.randn(16, 16, 16)", "torch.randn(16, 16, 16)");
  check("torch.randn(8, 2, 16, 16)", "torch.randn(8, 2, 16, 16)");
  // B broadcast over the batch: folded into rows.
  check("torch.randn(8, 16, 32)", "torch.randn(32, 96)");
  check("torch.randn(8, 16, 32)", "torch.randn(96, 32).t()");
  // A broadcast over the batch; both broadcast over different dims.
  check("torch.randn(5, 7)", "torch.randn(3, 7, 9)");
  check("torch.randn(4, 1, 5, 7)", "torch.randn(3, 7, 9)");
  check("torch.randn(1, 6, 5, 7).double()", "torch.randn(2, 1, 7, 9).double()");
  check("torch.randn(3, 1, 7).expand(3, 5, 7)", "torch.randn(3, 7, 4)");
  check("torch.randn(0, 5, 7)", "torch.randn(7, 4)");
}

TEST(Gemm, PermutedOperands) {
  KILN_REQUIRE_LLVM();
  // Attention's q @ k^T and att @ v, from [b, t, h, d] views.
  check("torch.randn(8, 16, 2, 16).transpose(1, 2)", "torch.randn(8, 16, 2, 16).permute(0, 2, 3, 1)");
  check("torch.randn(8, 2, 16, 16)", "torch.randn(8, 16, 2, 16).transpose(1, 2)");
  check("torch.randn(5, 6, 7).permute(2, 0, 1)", "torch.randn(9, 6, 7).permute(2, 1, 0)[:, :, 1:8]");
  check("torch.randn(3, 20, 5).permute(1, 0, 2)", "torch.randn(5, 20, 4).permute(1, 0, 2)");
}

TEST(Gemm, LargeBlockedAndThreaded) {
  KILN_REQUIRE_LLVM();
  // Several depth blocks (k > 256), column blocks (n > nc) and row blocks.
  check("torch.randn(300, 600)", "torch.randn(600, 700)");
  check("torch.randn(600, 300).t()", "torch.randn(700, 600).t()");
  check("torch.randn(4, 100, 513).double()", "torch.randn(4, 513, 70).double()");
}

TEST(Gemm, SpecsFoldAndMerge) {
  KILN_REQUIRE_LLVM();
  auto spec_of = [](const std::string& a, const std::string& b) {
    return format_gemm_spec(*make_gemm_spec(meta_of(make(a)), meta_of(make(b))));
  };
  // Linear over [8, 16, 32]: one product of 128 rows.
  EXPECT_EQ(spec_of("torch.randn(8, 16, 32)", "torch.randn(96, 32).t()"), "gemm float32 m128 n96 k32 a(32,1) b(1,32)");
  // Two contiguous batch dims merge into one.
  EXPECT_EQ(spec_of("torch.randn(8, 2, 16, 4)", "torch.randn(8, 2, 4, 16)"),
            "gemm float32 m16 n16 k4 a(4,1) b(16,1) batch[16] a[64] b[64]");
  // Not CPU floats: no spec.
  EXPECT_FALSE(make_gemm_spec(meta_of(make("torch.ones(2, 2, dtype=torch.int64)")),
                              meta_of(make("torch.ones(2, 2, dtype=torch.int64)")))
                   .has_value());
}

TEST(Gemm, CountsAndCache) {
  KILN_REQUIRE_LLVM();
  const std::optional<GemmSpec> spec = make_gemm_spec(meta_of(make("torch.randn(9, 10)")), meta_of(make("torch.randn(10, 11)")));
  ASSERT_TRUE(spec.has_value());
  KernelSource first = KernelSource::Compiled, second = KernelSource::Compiled;
  const CpuKernel one = compile_gemm_cached(*spec, &first);
  const CpuKernel two = compile_gemm_cached(*spec, &second);
  EXPECT_EQ(second, KernelSource::Memory);
  EXPECT_EQ(one.fn, two.fn);
}

TEST(Gemm, RowsAtRunTimeServeEveryM) {
  KILN_REQUIRE_LLVM();
  clear_kernel_memory_cache();
  // Wide (6-row tiles, corner tiles where n % nr), narrow (8-row tiles),
  // float64, B transposed, B broadcast over a batch (folded into m).
  struct Shape {
    std::string a, b;  // a with {m} for the rows
  };
  const std::vector<Shape> shapes = {
      {"torch.randn({m}, 40)", "torch.randn(40, 70)"},
      {"torch.randn({m}, 24)", "torch.randn(24, 8)"},
      {"torch.randn({m}, 33).double()", "torch.randn(33, 19).double()"},
      {"torch.randn({m}, 64)", "torch.randn(192, 64).t()"},
      {"torch.randn(2, {m}, 32)", "torch.randn(32, 48)"},
  };
  for (const Shape& shape : shapes) {
    std::string first_key;
    // (m = 1 normalizes A's row stride to 0: another kernel, checked too.)
    std::string one = shape.a;
    one.replace(one.find("{m}"), 3, "1");
    check(one, shape.b, /*rows_at_run_time=*/true);
    for (int m : {7, 5, 6, 8, 13, 72, 73, 150, 301}) {
      std::string a = shape.a;
      a.replace(a.find("{m}"), 3, std::to_string(m));
      KernelSource source = KernelSource::Compiled;
      check(a, shape.b, /*rows_at_run_time=*/true, &source);
      const std::optional<GemmSpec> spec = make_gemm_spec(meta_of(make(a)), meta_of(make(shape.b)));
      ASSERT_TRUE(spec.has_value());
      GemmSpec run_time = *spec;
      run_time.rows_at_run_time = true;
      EXPECT_NE(format_gemm_spec(run_time).find("rows@run"), std::string::npos);
      // One compile for the shape: every later m is a memory hit.
      if (first_key.empty()) {
        first_key = gemm_code_text(run_time);
      } else {
        EXPECT_EQ(gemm_code_text(run_time), first_key);
        EXPECT_EQ(source, KernelSource::Memory) << a;
      }
    }
  }
  // A constant-m kernel keeps m in its key.
  const std::optional<GemmSpec> fixed = make_gemm_spec(meta_of(make("torch.randn(9, 10)")), meta_of(make("torch.randn(10, 11)")));
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(gemm_code_text(*fixed), format_gemm_spec(*fixed));
  EXPECT_NE(gemm_code_text(*fixed).find("m9 "), std::string::npos);
}

TEST(Gemm, VectorizedTileInIr) {
  KILN_REQUIRE_LLVM();
  const std::optional<GemmSpec> spec = make_gemm_spec(meta_of(make("torch.randn(128, 32)")), meta_of(make("torch.randn(32, 96)")));
  ASSERT_TRUE(spec.has_value());
  const CpuKernel compiled = compile_gemm(*spec, /*keep_ir=*/true);
  const GemmPlan plan = plan_gemm(*spec);
  const std::string vector = "<" + std::to_string(plan.vector) + " x float>";
  EXPECT_NE(compiled.optimized_llvm_ir.find("llvm.fmuladd.v" + std::to_string(plan.vector) + "f32"), std::string::npos)
      << "no vector multiply-add of " << vector;
}

TEST(Gemm, NodeRunsTheKernelAndSendsOtherLayoutsToTorch) {
  KILN_REQUIRE_LLVM();
  PyRef a = make("torch.randn(6, 5)"), b = make("torch.randn(5, 4)");
  PyRef at = make("torch.randn(5, 6).t()");
  bool compiled_now = false;
  PyRef call = make_gemm_call(meta_of(a), meta_of(b), MatmulPolicy::Kiln, false, &compiled_now);
  ASSERT_TRUE(call) << test::take_error();
  PyRef ns = scope();
  for (PyObject* left : {a.get(), at.get()}) {
    const GemmCounts before = gemm_counts();
    PyObject* args[] = {left, b.get()};
    PyRef result = PyRef::steal(PyObject_Vectorcall(call.get(), args, 2, nullptr));
    ASSERT_TRUE(result) << test::take_error();
    const GemmCounts after = gemm_counts();
    // The node was made for a's layout: the transposed operand goes to torch.
    const bool generated = left == a.get();
    EXPECT_EQ(after.kiln_calls - before.kiln_calls, generated ? 1 : 0);
    EXPECT_EQ(after.aten_calls - before.aten_calls, generated ? 0 : 1);
    PyDict_SetItemString(ns.get(), "_r", result.get());
    PyDict_SetItemString(ns.get(), "_a", left);
    PyDict_SetItemString(ns.get(), "_b", b.get());
    PyRef ok = PyRef::steal(PyRun_String("within(_r, _a, _b)", Py_eval_input, ns.get(), ns.get()));
    ASSERT_TRUE(ok) << test::take_error();
    EXPECT_EQ(ok.get(), Py_True);
  }
  // Not a float32/float64 CPU product: no node.
  EXPECT_FALSE(make_gemm_call(meta_of(make("torch.ones(2, 2, dtype=torch.int32)")),
                              meta_of(make("torch.ones(2, 2, dtype=torch.int32)")), MatmulPolicy::Kiln, false, &compiled_now));
  EXPECT_FALSE(make_gemm_call(meta_of(a), meta_of(b), MatmulPolicy::Aten, false, &compiled_now));
}

}  // namespace
}  // namespace kiln::inductor::cpu
