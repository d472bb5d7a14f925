// Tests of Note [Run-time outer layout] (inductor/cpu/runtime_outer_layout.cpp):
// kernels that differ only in their outer sizes and strides share one key
// and one compiled function, and that function computes each of them right
// (checked against loops written here), on one thread and split over two.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/cpu/kernel_cache.h"
#include "inductor/cpu/kernel_runner.h"
#include "inductor/kernel_cache_file.h"
#include "tests/cpp/inductor/cpu_test_util.h"

namespace kiln::inductor::cpu {
namespace {

// x[2, n, 4, 16] read as its [2, 4, n, 16] permute (a head split), times 2
// plus 1, written contiguous: the strides of dims 0 and 2 are multiples of n.
Kernel head_split(int64_t n) {
  Kernel k;
  k.name = "head_split";
  k.sizes = {2, 4, n, 16};
  k.add_input({DType::Float32, {n * 64, 16, 64, 1}, 0});
  const int x = k.load(0);
  const int y = k.binary(BinaryOp::Add, k.binary(BinaryOp::Mul, x, k.constant(DType::Float32, 2)),
                         k.constant(DType::Float32, 1));
  KernelOutput out;
  out.strides = {4 * n * 16, n * 16, 16, 1};
  out.value = y;
  k.add_output(out);
  return k;
}

// Row sums of x[2, n, 64] + pos[n, 64] broadcast over dim 0 (GPT-2's
// embeddings before a layer norm): dim 2 reduced, result [2, n].
Kernel row_sums(int64_t n) {
  Kernel k;
  k.name = "row_sums";
  k.sizes = {2, n, 64};
  k.reduced = {2};
  k.add_input({DType::Float32, {n * 64, 64, 1}, 0});
  k.add_input({DType::Float32, {0, 64, 1}, 0});
  const int sum = k.reduce(ReduceOp::Sum, k.binary(BinaryOp::Add, k.load(0), k.load(1)));
  KernelOutput out;
  out.strides = {n, 1, 0};
  out.value = sum;
  out.has_tensor_shape = true;
  out.tensor_sizes = {2, n};
  out.tensor_strides = {n, 1};
  k.add_output(out);
  return k;
}

std::vector<float> ramp(int64_t count, float scale) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 97) * scale - 1.5f;
  return v;
}

// Compiles through the memory cache, so kernels of one key share a function.
CpuKernel compiled(const Kernel& kernel, KernelSource* source) {
  EXPECT_EQ(verify(kernel), "");
  return compile_cached(kernel, source);
}

class RuntimeOuterLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_codegen_available()) return;
    set_kernel_cache_dir("");
    clear_kernel_memory_cache();
  }
  void TearDown() override { clear_kernel_memory_cache(); }
};

TEST_F(RuntimeOuterLayout, WhichDimsAreReadAtRunTime) {
  // Pointwise: every dim but the innermost; rank 1: the size alone.
  const RuntimeOuterDims split_copy = runtime_outer_dims(head_split(9));
  EXPECT_EQ(split_copy.sizes, 3);
  EXPECT_EQ(split_copy.strides, 3);
  Kernel flat;
  flat.sizes = {1000};
  flat.add_input({DType::Float32, {1}, 0});
  flat.add_output({DType::Float32, {1}, flat.load(0)});
  EXPECT_EQ(runtime_outer_dims(flat).sizes, 1);
  EXPECT_EQ(runtime_outer_dims(flat).strides, 0);
  EXPECT_EQ(abi_size_words(flat, runtime_outer_dims(flat)), 1u);
  // A reduction: the kept dims before the reduced one.
  const RuntimeOuterDims rows = runtime_outer_dims(row_sums(9));
  EXPECT_EQ(rows.sizes, 2);
  EXPECT_EQ(rows.strides, 2);
  EXPECT_EQ(abi_size_words(row_sums(9), rows), 3u + 3u * 2u);
  std::vector<int64_t> words(abi_size_words(row_sums(9), rows));
  fill_abi_sizes(row_sums(9), rows, words.data());
  EXPECT_EQ(words, (std::vector<int64_t>{2, 9, 64, 9 * 64, 64, 0, 64, 9, 1}));
  // A split reduction (two rows of a million) plans its chunks from its
  // sizes: nothing is read at run time.
  Kernel split = row_sums(1);
  split.sizes = {2, 1, 1 << 20};
  split.inputs[0].strides = {1 << 20, 1 << 20, 1};
  split.inputs[1].strides = {0, 1 << 20, 1};
  ASSERT_GT(split_reduction(split).chunks, 0);
  EXPECT_EQ(runtime_outer_dims(split).sizes, 0);
  // A kernel reducing dim 0 (an outer reduction with its tile dim).
  Kernel outer;
  outer.sizes = {100, 8};
  outer.reduced = {0};
  outer.add_input({DType::Float32, {8, 1}, 0});
  outer.add_output({DType::Float32, {0, 1}, outer.reduce(ReduceOp::Sum, outer.load(0))});
  EXPECT_EQ(runtime_outer_dims(outer).sizes, 0);
}

TEST_F(RuntimeOuterLayout, KeysLeaveOutOnlyTheOuterSizesAndStrides) {
  KILN_REQUIRE_LLVM();
  EXPECT_EQ(kernel_cache_key(head_split(5)), kernel_cache_key(head_split(300)));
  EXPECT_EQ(kernel_cache_key(row_sums(5)), kernel_cache_key(row_sums(300)));
  // An inner size, a zero stride becoming nonzero, a constant: other code.
  Kernel wider = row_sums(5);
  wider.sizes[2] = 32;
  EXPECT_NE(kernel_cache_key(row_sums(5)), kernel_cache_key(wider));
  Kernel unbroadcast = row_sums(5);
  unbroadcast.inputs[1].strides[0] = 5 * 64;
  EXPECT_NE(kernel_cache_key(row_sums(5)), kernel_cache_key(unbroadcast));
  Kernel offset = row_sums(5);
  offset.inputs[0].offset = 64;
  EXPECT_NE(kernel_cache_key(row_sums(5)), kernel_cache_key(offset));
}

TEST_F(RuntimeOuterLayout, OneFunctionComputesEveryLengthOfAHeadSplit) {
  KILN_REQUIRE_LLVM();
  KernelSource first = KernelSource::Compiled;
  const CpuKernel shared = compiled(head_split(3), &first);
  EXPECT_EQ(first, KernelSource::Compiled);
  for (int64_t n : {3, 17, 700}) {
    SCOPED_TRACE(n);
    const Kernel k = head_split(n);
    KernelSource source = KernelSource::Compiled;
    const CpuKernel fn = compiled(k, &source);
    EXPECT_EQ(fn.fn, shared.fn);
    EXPECT_EQ(source, KernelSource::Memory);
    const std::vector<float> x = ramp(2 * n * 64, 0.25f);
    for (int threads : {1, 2}) {
      std::vector<float> out(static_cast<size_t>(2 * n * 64), -7.0f);
      char* data[] = {reinterpret_cast<char*>(const_cast<float*>(x.data())), reinterpret_cast<char*>(out.data())};
      call_cpu_kernel(fn, k, data, threads);
      int64_t wrong = 0;
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t h = 0; h < 4; ++h) {
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t e = 0; e < 16; ++e) {
              const float want = x[static_cast<size_t>(b * n * 64 + t * 64 + h * 16 + e)] * 2 + 1;
              wrong += out[static_cast<size_t>(((b * 4 + h) * n + t) * 16 + e)] != want;
            }
          }
        }
      }
      EXPECT_EQ(wrong, 0) << threads << " threads";
    }
  }
}

TEST_F(RuntimeOuterLayout, OneFunctionComputesEveryLengthOfRowSums) {
  KILN_REQUIRE_LLVM();
  const CpuKernel shared = compiled(row_sums(4), nullptr);
  for (int64_t n : {4, 33, 600}) {
    SCOPED_TRACE(n);
    const Kernel k = row_sums(n);
    KernelSource source = KernelSource::Compiled;
    const CpuKernel fn = compiled(k, &source);
    EXPECT_EQ(fn.fn, shared.fn);
    EXPECT_EQ(source, KernelSource::Memory);
    const std::vector<float> x = ramp(2 * n * 64, 0.5f);
    const std::vector<float> pos = ramp(n * 64, -0.125f);
    for (int threads : {1, 2}) {
      std::vector<float> out(static_cast<size_t>(2 * n), -7.0f);
      char* data[] = {reinterpret_cast<char*>(const_cast<float*>(x.data())),
                      reinterpret_cast<char*>(const_cast<float*>(pos.data())), reinterpret_cast<char*>(out.data())};
      call_cpu_kernel(fn, k, data, threads);
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t t = 0; t < n; ++t) {
          double want = 0;
          for (int64_t e = 0; e < 64; ++e) {
            want += static_cast<double>(x[static_cast<size_t>((b * n + t) * 64 + e)]) +
                    static_cast<double>(pos[static_cast<size_t>(t * 64 + e)]);
          }
          ASSERT_NEAR(out[static_cast<size_t>(b * n + t)], want, 1e-3) << "row " << b << ", " << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::inductor::cpu
