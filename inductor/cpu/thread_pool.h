// kiln's own small thread pool for running one kernel over several
// threads (Note [Kernel threads] in thread_pool.cpp). No Python, no ATen.
#pragma once

#include <functional>

namespace kiln::inductor::cpu {

// Runs work(0) .. work(chunks - 1), each once, on up to `threads` threads:
// the caller and pool workers (started on first need, kept for the
// process), each taking the next chunk when done with one, so more chunks
// than threads balance a thread slowed by other load. Returns when every
// chunk has finished. work must not throw.
void parallel_run(int chunks, int threads, const std::function<void(int)>& work);

}  // namespace kiln::inductor::cpu
