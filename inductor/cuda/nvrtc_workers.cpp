#include "inductor/cuda/nvrtc_workers.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/stopwatch.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/cuda/nvrtc_worker_protocol.h"

extern char** environ;

namespace kiln::inductor::cuda {

// Note [NVRTC workers]
// A training graph has a hundred or more kernels to compile, and
// compile_entries (fuse_kernels.cpp) compiles them on one thread a core.
// But NVRTC's compiles in one process do not run in parallel: measured on
// the 16-core H100 host (NVRTC 13, 48 compiles of small kernels), one
// thread took 1.86 s and 2, 4, 8 and 16 threads all about 0.8-0.95 s,
// each compile growing from 19 ms alone to 306 ms among 16. So kiln
// compiles in worker processes, one compile each at a time, each its own
// NVRTC: kiln_nvrtc_worker (nvrtc_worker_main.cpp), beside libkiln, is
// started with posix_spawn (no fork of a threaded process holding a CUDA
// context and the GIL) when a compile finds no idle worker and fewer than
// nvrtc_worker_limit() run, loads the same libnvrtc kiln found
// (KILN_NVRTC_LIBRARY), and answers (arch, source) requests over a socket
// pair (nvrtc_worker_protocol.h) with the cubin or NVRTC's error until the
// socket closes. A worker idle for kIdleLife is ended by a thread that
// runs while workers do, so a process that compiled once does not keep
// NVRTC's memory. The cubin is the same bytes as an in-process compile
// (the same library, options and source; a C++ test checks it); a cubin
// cache key does not depend on where it was compiled.
// Failure: when no worker can start (no program beside libkiln, spawn
// refused) compile_cubin says so under KILN_LOGS=kernels and compiles in
// this process from then on; a worker that dies mid-compile (NVRTC
// crashed on that source) fails that kernel's compile with a CudaError
// naming the process and its signal, and the host process lives. After a
// fork (Python multiprocessing) the child drops the workers it inherited
// and starts its own: the parent's are not its children.
// How many: the H100 host's 16 cores ran 16 NVRTC processes alone at full
// speed (96 small compiles: 2.5 s in one process, 0.13 s in 16), but
// inside kiln's compile of tv-swin_t's training graphs, in one device
// call, 16 workers took 166 ms a compile and 6 workers 24 ms (the first
// call 5.9 s against 3.8 s): the compiling process itself needs cores.
// (8 workers on another host of the pool took 136 ms a compile; hosts
// differ, and the cause of the slowdown is not pinned down.) So the
// default is half the cores, at most kDefaultWorkerCap.
// KILN_NVRTC_WORKERS=0 compiles in the calling process (and N caps them).

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kIdleLife = std::chrono::seconds(10);
// Workers by default: half the cores, at most this many (Note [NVRTC
// workers]: on one 16-core host, 6 workers compiled 7x faster than 16).
constexpr int kDefaultWorkerCap = 6;

// A worker could not be started: compile_cubin compiles in process.
class WorkerStartError : public CudaError {
 public:
  using CudaError::CudaError;
};

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  Clock::time_point idle_since;
};

std::atomic<int64_t> g_started{0};

// How an ended child finished, for messages; reaps it.
std::string reap(pid_t pid) {
  int status = 0;
  pid_t got = -1;
  do {
    got = waitpid(pid, &status, 0);
  } while (got < 0 && errno == EINTR);
  if (got != pid) return "its exit status unknown";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "wait status " + std::to_string(status);
}

// The environment a worker starts with: this process's, with
// KILN_NVRTC_LIBRARY naming the libnvrtc kiln loaded.
std::vector<std::string> worker_environment(const std::string& library) {
  std::vector<std::string> env;
  const std::string key = "KILN_NVRTC_LIBRARY=";
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, key.c_str(), key.size()) != 0) env.emplace_back(*e);
  }
  env.push_back(key + library);
  return env;
}

Worker start_worker() {
  std::string why;
  const std::string program = nvrtc_worker_program(&why);
  if (program.empty()) throw WorkerStartError(why);
  std::string library;
  try {
    library = nvrtc_library_path();
  } catch (const CudaError& e) {
    throw WorkerStartError(e.what());
  }
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    throw WorkerStartError(std::string("socketpair failed: ") + std::strerror(errno));
  }
  // dup2 onto the same number would keep close-on-exec set.
  if (sockets[1] == kNvrtcWorkerFd) {
    const int moved = fcntl(sockets[1], F_DUPFD_CLOEXEC, kNvrtcWorkerFd + 1);
    close(sockets[1]);
    sockets[1] = moved;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sockets[1], kNvrtcWorkerFd);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const std::vector<std::string> env = worker_environment(library);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(sockets[1]);
  if (rc != 0) {
    close(sockets[0]);
    throw WorkerStartError("could not start " + program + ": " + std::strerror(rc));
  }
  ++g_started;
  KILN_LOG(kernels, "NVRTC worker process " << pid << " started");
  return Worker{pid, sockets[0], Clock::now()};
}

// Ends a worker: closing its socket ends its request loop.
std::string end_worker(const Worker& worker) {
  close(worker.fd);
  return reap(worker.pid);
}

class WorkerPool {
 public:
  // An idle worker, or a new one, or the first to be released; with
  // `fresh`, a new one (ending an idle one when at the limit).
  Worker acquire(bool fresh) {
    std::unique_lock<std::mutex> lock(mutex_);
    drop_inherited();
    for (;;) {
      if (!idle_.empty() && !fresh) {
        Worker worker = idle_.back();
        idle_.pop_back();
        int status = 0;
        if (waitpid(worker.pid, &status, WNOHANG) != worker.pid) return worker;
        close(worker.fd);  // it died while idle (and is reaped now)
        --running_;
        continue;
      }
      if (!idle_.empty() && running_ >= nvrtc_worker_limit()) {
        const Worker ending = idle_.back();
        idle_.pop_back();
        --running_;
        lock.unlock();
        end_worker(ending);
        lock.lock();
        continue;
      }
      if (running_ < nvrtc_worker_limit()) {
        ++running_;
        lock.unlock();
        try {
          return start_worker();
        } catch (...) {
          lock.lock();
          --running_;
          freed_.notify_all();
          throw;
        }
      }
      freed_.wait(lock);
    }
  }

  // Back to idle, after a finished request.
  void release(Worker worker) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (owner_ != getpid()) return;  // forked mid-request: not ours to keep
    worker.idle_since = Clock::now();
    idle_.push_back(worker);
    freed_.notify_all();  // the retiring thread waits on it too
    if (!retiring_) {
      retiring_ = true;
      std::thread([this] { retire_idle(); }).detach();
    }
  }

  // Process ids of the idle workers.
  std::vector<int> idle_pids() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int> pids;
    for (const Worker& worker : idle_) pids.push_back(worker.pid);
    return pids;
  }

  // A worker whose request failed (it died, or its stream broke).
  std::string discard(const Worker& worker) {
    const std::string how = end_worker(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
    freed_.notify_all();
    return how;
  }

 private:
  // Ends workers idle for kIdleLife, while any run.
  void retire_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (running_ > 0 && owner_ == getpid()) {
      freed_.wait_for(lock, kIdleLife / 2);
      std::vector<Worker> ending;
      const Clock::time_point now = Clock::now();
      for (size_t i = idle_.size(); i-- > 0;) {
        if (now - idle_[i].idle_since < kIdleLife) continue;
        ending.push_back(idle_[i]);
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        --running_;
      }
      if (ending.empty()) continue;
      lock.unlock();
      for (const Worker& worker : ending) {
        KILN_LOG(kernels, "NVRTC worker process " << worker.pid << " idle, ended (" << end_worker(worker) << ")");
      }
      lock.lock();
    }
    retiring_ = false;
  }

  // In a forked child: the inherited workers belong to the parent.
  void drop_inherited() {
    if (owner_ == getpid()) return;
    for (const Worker& worker : idle_) close(worker.fd);
    idle_.clear();
    running_ = 0;
    retiring_ = false;
    owner_ = getpid();
  }

  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<Worker> idle_;
  int running_ = 0;  // started, not ended (idle or compiling)
  bool retiring_ = false;
  pid_t owner_ = getpid();
};

WorkerPool& pool() {
  static WorkerPool* made = new WorkerPool();  // kept: workers end with the process
  return *made;
}

// Whether compile_cubin still tries workers (false after one could not start).
std::atomic<bool> g_workers_on{true};

}  // namespace

int nvrtc_worker_limit() {
  static const int limit = [] {
    if (const char* text = std::getenv("KILN_NVRTC_WORKERS"); text != nullptr && *text) {
      char* end = nullptr;
      const long n = std::strtol(text, &end, 10);
      if (*end == '\0' && n >= 0) return static_cast<int>(n);
      KILN_LOG(kernels, "KILN_NVRTC_WORKERS=" << text << " is no number: ignored");
    }
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    return std::clamp(cores / 2, 1, kDefaultWorkerCap);
  }();
  return limit;
}

std::string nvrtc_worker_program(std::string* why) {
  static const std::pair<std::string, std::string> found = []() -> std::pair<std::string, std::string> {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&nvrtc_worker_program), &info) == 0 || info.dli_fname == nullptr) {
      return {"", "libkiln's own path is unknown (dladdr failed)"};
    }
    std::string library = info.dli_fname;
    const size_t slash = library.rfind('/');
    const std::string program = (slash == std::string::npos ? "." : library.substr(0, slash)) + "/kiln_nvrtc_worker";
    if (access(program.c_str(), X_OK) != 0) return {"", program + " is missing or not executable"};
    return {program, ""};
  }();
  if (why != nullptr) *why = found.second;
  return found.first;
}

std::string compile_cubin_in_worker(const std::string& source, const std::string& arch, std::string* messages) {
  WorkerPool& workers = pool();
  std::vector<std::string> reply;
  // A worker may have died while idle (killed from outside): the request
  // goes once more, to a new worker; that one dying too means the request
  // kills them.
  for (int attempt = 1;; ++attempt) {
    const base::Stopwatch clock;
    const Worker worker = workers.acquire(/*fresh=*/attempt > 1);
    if (write_fields(worker.fd, {arch, source}) && read_fields(worker.fd, 4, &reply)) {
      workers.release(worker);
      KILN_LOG(perf, "NVRTC worker process " << worker.pid << ": " << reply[3] << " ms compiling, " << clock.ms()
                                             << " ms in all");
      break;
    }
    const std::string how = workers.discard(worker);
    KILN_LOG(kernels, "NVRTC worker process " << worker.pid << " ended mid-request (" << how << ")");
    if (attempt == 2) {
      throw CudaError("kiln's NVRTC worker process " + std::to_string(worker.pid) +
                      " ended while compiling a kernel (" + how + "), as did the one before it");
    }
  }
  if (reply[0] != "ok") throw CudaError(reply[1]);
  if (messages != nullptr) *messages = std::move(reply[2]);
  return std::move(reply[1]);
}

std::vector<int> idle_nvrtc_workers() { return pool().idle_pids(); }

int64_t nvrtc_workers_started() { return g_started; }

std::string compile_cubin(const std::string& source, const std::string& arch) {
  std::string messages;
  std::string cubin;
  bool compiled = false;
  if (g_workers_on && nvrtc_worker_limit() > 0) {
    try {
      cubin = compile_cubin_in_worker(source, arch, &messages);
      compiled = true;
    } catch (const WorkerStartError& e) {
      if (g_workers_on.exchange(false)) {
        KILN_LOG(kernels, "NVRTC workers off, compiling in this process: " << e.what());
      }
    }
  }
  if (!compiled) cubin = compile_cubin_here(source, arch, &messages);
  if (!messages.empty()) KILN_LOG(kernels, "NVRTC: " << messages);
  return cubin;
}

}  // namespace kiln::inductor::cuda
