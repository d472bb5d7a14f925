#include "inductor/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::inductor::cpu {
namespace {

// Note [Kernel threads]
// One pool per process, made on first use and never destroyed (its
// workers block on a condition variable until the process ends). A call
// publishes a job (the chunk count and the work) under a new generation
// number; workers and the caller take chunk indices from an atomic counter
// until none is left, so the caller never idles while workers start and a
// thread that the machine's other load slows takes fewer chunks. One
// job runs at a time (kernels of several Python threads take turns for
// their parallel parts). Workers start as jobs need them (threads - 1 of
// them), so a process that never runs a large kernel starts no thread.
class Pool {
 public:
  void run(int chunks, int threads, const std::function<void(int)>& work) {
    std::lock_guard<std::mutex> one_job(job_mutex_);
    start_workers(std::min(chunks, threads) - 1);
    auto job = std::make_shared<Job>();
    job->work = &work;
    job->chunks = chunks;
    job->pending.store(chunks);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      ++generation_;
    }
    wake_.notify_all();
    take_chunks(*job);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return job->pending.load() == 0; });
    job_.reset();
  }

 private:
  // One call's chunks. Shared with the workers, so one that wakes late
  // finds this job's counter exhausted rather than the next job's.
  struct Job {
    const std::function<void(int)>* work = nullptr;
    int chunks = 0;
    std::atomic<int> next{0};
    std::atomic<int> pending{0};
  };

  void start_workers(int wanted) {
    while (static_cast<int>(workers_.size()) < wanted) {
      workers_.emplace_back([this] { worker(); });
      workers_.back().detach();
    }
  }

  void take_chunks(Job& job) {
    for (int i = job.next.fetch_add(1); i < job.chunks; i = job.next.fetch_add(1)) {
      (*job.work)(i);
      if (job.pending.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_all();
      }
    }
  }

  void worker() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen && job_ != nullptr; });
        seen = generation_;
        job = job_;
      }
      take_chunks(*job);
    }
  }

  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
};

}  // namespace

void parallel_run(int chunks, int threads, const std::function<void(int)>& work) {
  if (chunks <= 1 || threads <= 1) {
    for (int i = 0; i < chunks; ++i) work(i);
    return;
  }
  static Pool* pool = new Pool();  // never destroyed: workers outlive main
  pool->run(chunks, threads, work);
}

}  // namespace kiln::inductor::cpu
