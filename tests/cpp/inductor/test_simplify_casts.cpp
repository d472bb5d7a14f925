// Tests of inductor/simplify_casts.h (Note [Exact round trips]): which
// float16/bfloat16 round trips a kernel drops, which it keeps, and that the
// simplified kernel computes the same bits as the lowered one (both
// compiled for the CPU and run on the same tensors; skipped without LLVM).
#include <Python.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/simplify_casts.h"
#include "tests/cpp/inductor/cpu_test_util.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::inductor {
namespace {

using test::PyRef;

constexpr int64_t kRows = 6;
constexpr int64_t kColumns = 40;

size_t count_casts(const Kernel& k) {
  size_t n = 0;
  for (const Expr& e : k.exprs) n += e.kind == ExprKind::Cast;
  return n;
}

// A [kRows, kColumns] kernel reading `storage` values (in0) and a bool mask (in1).
Kernel two_inputs(DType storage) {
  Kernel k;
  k.name = "round_trips";
  k.sizes = {kRows, kColumns};
  k.add_input(KernelInput{storage, {kColumns, 1}, 0});
  k.add_input(KernelInput{DType::Bool, {kColumns, 1}, 0});
  return k;
}

void add_output(Kernel& k, int value, DType dtype) {
  k.add_output(KernelOutput{dtype, {kColumns, 1}, value, false, {}, {}});
}

// cast(cast(v, S), f32) for v of float32.
int round_trip(Kernel& k, int v, DType storage) { return k.cast(k.cast(v, storage), DType::Float32); }

// masked_fill(x * 0.125, mask, fill) on `storage` values as autocast
// decomposes it: every op in float32, every result rounded to `storage`.
Kernel masked_fill_chain(DType storage, double fill) {
  Kernel k = two_inputs(storage);
  const int x = k.cast(k.load(0), DType::Float32);
  const int scaled = round_trip(k, k.binary(BinaryOp::Mul, x, k.constant(DType::Float32, 0.125)), storage);
  const int filled = k.select(k.load(1), k.constant(DType::Float32, fill), scaled);
  const int result = round_trip(k, filled, storage);
  add_output(k, result, storage);
  add_output(k, k.unary(UnaryOp::Neg, result), DType::Float32);
  return k;
}

// Compiles both kernels, runs them on the same tensors (specials included)
// and expects the same outputs, NaNs compared by isnan.
void expect_same_bits(const Kernel& before, const Kernel& after, DType storage) {
  PyRef ns = test::exec_module(
      std::string("STORAGE = '") + (storage == DType::BFloat16 ? "bf16" : "f16") + "'\n"
      "import torch\n"
      "torch.manual_seed(3)\n"
      "x = torch.randn(6, 40) * 1e3\n"
      "x[0, :8] = torch.tensor([float('inf'), float('-inf'), float('nan'), -0.0, 0.0, 1e-40, -3e-39, 65504.0])\n"
      "x = x.to(torch.bfloat16 if STORAGE == 'bf16' else torch.float16)\n"
      "mask = torch.rand(6, 40) > 0.5\n");
  ASSERT_TRUE(ns) << test::take_error();
  const PyRef x = test::item(ns, "x"), mask = test::item(ns, "mask");
  PyObject* inputs[] = {x.get(), mask.get()};
  PyRef results[2];
  const Kernel* kernels[] = {&before, &after};
  for (int i = 0; i < 2; ++i) {
    const cpu::CpuKernel compiled = cpu::compile_cpu_kernel(*kernels[i]);
    results[i] = PyRef::steal(cpu::run_cpu_kernel(compiled, *kernels[i], inputs));
    ASSERT_TRUE(results[i]) << test::take_error();
  }
  PyDict_SetItemString(ns.get(), "_before", results[0].get());
  PyDict_SetItemString(ns.get(), "_after", results[1].get());
  PyRef same = PyRef::steal(PyRun_String(
      "all(b.dtype == a.dtype and bool(((b == a) & (b.signbit() == a.signbit()) | (b.isnan() & a.isnan())).all())"
      " for b, a in zip(_before, _after))",
      Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(same) << test::take_error();
  EXPECT_EQ(same.get(), Py_True) << format_kernel(before) << "\n" << format_kernel(after);
}

TEST(SimplifyCasts, AnExactSelectSkipsItsRoundTripAndStoresSkipTheirs) {
  for (DType storage : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(graph::dtype_short_name(storage));
    const Kernel before = masked_fill_chain(storage, -std::numeric_limits<double>::infinity());
    Kernel after = before;
    simplify_casts(after);
    ASSERT_EQ(verify(after), "");
    // Left: the load's conversion and the inexact product's round trip.
    EXPECT_EQ(count_casts(before), 5u);
    EXPECT_EQ(count_casts(after), 3u) << format_kernel(after);
    EXPECT_EQ(after.exprs[after.outputs[1].value].kind, ExprKind::Unary);
    EXPECT_EQ(after.exprs[after.exprs[after.outputs[1].value].operands[0]].kind, ExprKind::Select);
    KILN_REQUIRE_LLVM();
    expect_same_bits(before, after, storage);
  }
}

TEST(SimplifyCasts, InexactValuesKeepTheirRoundTrips) {
  // 0.1 is exact in neither; 65536 is a bfloat16 but overflows float16.
  for (double fill : {0.1, 65536.0}) {
    for (DType storage : {DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(std::to_string(fill) + " " + graph::dtype_short_name(storage));
      const Kernel before = masked_fill_chain(storage, fill);
      Kernel after = before;
      simplify_casts(after);
      const bool exact = fill == 65536.0 && storage == DType::BFloat16;
      EXPECT_EQ(count_casts(after), exact ? 3u : 5u) << format_kernel(after);
      KILN_REQUIRE_LLVM();
      expect_same_bits(before, after, storage);
    }
  }
}

TEST(SimplifyCasts, AStoredConversionOfAStorageValueStoresIt) {
  Kernel k = two_inputs(DType::BFloat16);
  const int x = k.load(0);
  add_output(k, k.cast(x, DType::Float32), DType::BFloat16);
  add_output(k, k.cast(k.cast(x, DType::Float32), DType::BFloat16), DType::BFloat16);
  Kernel simplified = k;
  simplify_casts(simplified);
  ASSERT_EQ(verify(simplified), "");
  EXPECT_EQ(count_casts(simplified), 0u) << format_kernel(simplified);
  EXPECT_EQ(simplified.outputs[0].value, 0);
  EXPECT_EQ(simplified.outputs[1].value, 0);
  KILN_REQUIRE_LLVM();
  expect_same_bits(k, simplified, DType::BFloat16);
}

TEST(SimplifyCasts, ARoundTripThroughAnotherStorageDtypeStays) {
  // bfloat16 values are not float16 values: a cast to float16 and back rounds.
  Kernel k = two_inputs(DType::BFloat16);
  const int x = k.cast(k.load(0), DType::Float32);
  add_output(k, round_trip(k, x, DType::Float16), DType::Float32);
  Kernel simplified = k;
  simplify_casts(simplified);
  EXPECT_EQ(count_casts(simplified), 3u) << format_kernel(simplified);
}

}  // namespace
}  // namespace kiln::inductor
