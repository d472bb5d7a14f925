// Independent tasks on a few short-lived threads: compile jobs (kernels,
// NVRTC programs) that each take milliseconds, where a pool would outlive
// its use.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace kiln::base {

// Calls task(i) for every i in [0, count), on up to `threads` threads (the
// calling thread alone when that is 1 or there is one task); each thread
// takes the next index as it finishes one, so slow tasks do not hold up
// fast ones. Returns when all are done. `task` must not throw.
template <typename Task>
void parallel_for(size_t count, size_t threads, const Task& task) {
  threads = std::min(count, threads);
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) task(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < count; i = next++) task(i);
    });
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace kiln::base
