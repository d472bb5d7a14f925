// The parts of mode="max-autotune" that need no GPU (inductor/cuda/
// cuda_autotune.h): which timing wins, the cache of choices and its keys,
// and what the log prints. Timing candidates on a GPU is
// tests/python/test_inductor_cuda.py's job.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "inductor/cuda/cuda_autotune.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {
namespace {

using graph::DType;

CandidateTiming timed(int tpr, double ms) {
  CandidateTiming t;
  t.config = LaunchConfig{tpr, 1, 4, 16, 0};
  t.ms = ms;
  return t;
}

CandidateTiming failed(int tpr, const std::string& why) {
  CandidateTiming t = timed(tpr, 0);
  t.error = why;
  return t;
}

// x.sum(1) over a [rows, points] float32 row-major tensor, named `name`.
Kernel row_sum(int64_t rows, int64_t points, const std::string& name = "k") {
  Kernel kernel;
  kernel.name = name;
  kernel.sizes = {rows, points};
  kernel.reduced = {1};
  kernel.inputs.push_back(KernelInput{DType::Float32, {points, 1}, 0});
  const int sum = kernel.reduce(ReduceOp::Sum, kernel.load(0));
  kernel.add_output(KernelOutput{DType::Float32, {1, 0}, sum});
  EXPECT_EQ(verify(kernel), "");
  return kernel;
}

TEST(CudaAutotune, TheFastestTimedCandidateWinsAndTiesGoToTheFirst) {
  EXPECT_EQ(fastest_candidate({timed(256, 0.30), timed(128, 0.25), timed(512, 0.27)}), 1u);
  EXPECT_EQ(fastest_candidate({timed(256, 0.25), timed(128, 0.25)}), 0u);  // the default keeps a tie
  EXPECT_EQ(fastest_candidate({timed(256, 0.30), failed(128, "out of resources"), timed(512, 0.29)}), 2u);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(fastest_candidate({timed(256, nan), timed(128, -1), timed(512, 0.4)}), 2u);
  EXPECT_FALSE(fastest_candidate({failed(256, "a"), failed(128, "b")}).has_value());
  EXPECT_FALSE(fastest_candidate({}).has_value());
}

TEST(CudaAutotune, TheCacheKeepsTheFirstChoicePerKey) {
  AutotuneCache cache;
  EXPECT_FALSE(cache.find("a").has_value());
  const LaunchConfig first{128, 2, 32, 16, 0}, second{512, 1, 8, 0, 0};
  EXPECT_EQ(cache.insert("a", first), first);
  EXPECT_EQ(cache.insert("a", second), first);  // a later (racing) choice does not replace it
  EXPECT_EQ(cache.insert("b", second), second);
  EXPECT_EQ(cache.find("a"), first);
  EXPECT_EQ(cache.find("b"), second);
  EXPECT_EQ(cache.size(), 2u);
  // Threads choosing at once: one choice per key stands, and each thread is
  // told which.
  std::vector<std::thread> threads;
  std::vector<LaunchConfig> told(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { told[t] = cache.insert("c", LaunchConfig{32 << (t % 4), 1, 0, 16, 0}); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const LaunchConfig& config : told) EXPECT_EQ(config, told[0]);
  EXPECT_EQ(cache.find("c"), told[0]);
}

TEST(CudaAutotune, KeysNameTheKernelsShapeNotItsName) {
  EXPECT_EQ(autotune_key(row_sum(64, 4096, "first"), "sm_90a"), autotune_key(row_sum(64, 4096, "second"), "sm_90a"));
  EXPECT_NE(autotune_key(row_sum(64, 4096), "sm_90a"), autotune_key(row_sum(64, 5000), "sm_90a"));
  EXPECT_NE(autotune_key(row_sum(64, 4096), "sm_90a"), autotune_key(row_sum(128, 4096), "sm_90a"));
  EXPECT_NE(autotune_key(row_sum(64, 4096), "sm_90a"), autotune_key(row_sum(64, 4096), "sm_80"));
  // The process's cache is one object.
  EXPECT_EQ(&autotune_cache(), &autotune_cache());
}

TEST(CudaAutotune, TheLogListsEveryCandidateAndMarksTheWinner) {
  const std::vector<CandidateTiming> timings = {timed(256, 0.3), timed(128, 0.25), failed(1024, "no")};
  const std::string text = format_timings(timings, 1u);
  EXPECT_EQ(text,
            "    tpr=256 rpb=1 items<=4 vec=16B (default): 0.3000 ms\n"
            "  * tpr=128 rpb=1 items<=4 vec=16B: 0.2500 ms\n"
            "    tpr=1024 rpb=1 items<=4 vec=16B: failed: no\n");
}

}  // namespace
}  // namespace kiln::inductor::cuda
