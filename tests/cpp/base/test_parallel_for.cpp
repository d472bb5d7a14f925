// Tests of base/parallel_for.h: every index runs exactly once, on the
// calling thread when one thread is asked for, and nothing for no tasks.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "base/parallel_for.h"

namespace kiln::base {
namespace {

TEST(ParallelFor, RunsEveryIndexOnce) {
  for (size_t threads : {1u, 2u, 4u, 64u}) {
    std::vector<std::atomic<int>> runs(100);
    parallel_for(runs.size(), threads, [&](size_t i) { ++runs[i]; });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << "index " << i << ", " << threads << " threads";
  }
}

TEST(ParallelFor, OneThreadIsTheCallersAndNoTasksRunNothing) {
  const std::thread::id caller = std::this_thread::get_id();
  bool elsewhere = false;
  parallel_for(5, 1, [&](size_t) { elsewhere |= std::this_thread::get_id() != caller; });
  EXPECT_FALSE(elsewhere);
  int ran = 0;
  parallel_for(0, 8, [&](size_t) { ++ran; });
  EXPECT_EQ(ran, 0);
}

}  // namespace
}  // namespace kiln::base
