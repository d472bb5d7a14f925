// NVRTC in worker processes (Note [NVRTC workers]): kiln compiles its
// CUDA kernels in child processes running kiln_nvrtc_worker, because one
// process's NVRTC compiles do not run in parallel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::inductor::cuda {

// Worker processes kiln may run at once: KILN_NVRTC_WORKERS when set to a
// number (0 compiles in the calling process), else half the machine's
// cores, at most 6.
int nvrtc_worker_limit();

// The worker program's path (kiln_nvrtc_worker beside libkiln), or "" with
// `why` (when given) saying why there is none.
std::string nvrtc_worker_program(std::string* why = nullptr);

// Compiles `source` for `arch` in an idle worker process (started when
// none is idle and fewer than nvrtc_worker_limit() run), with NVRTC's
// warnings in `messages`. Throws CudaError when NVRTC fails (its log), no
// worker can start, or two workers in turn die on the request (which
// process, how).
std::string compile_cubin_in_worker(const std::string& source, const std::string& arch, std::string* messages);

// Process ids of the workers idle now (tests end them from outside).
std::vector<int> idle_nvrtc_workers();

// Worker processes started in this process so far (their lives end when
// idle: Note [NVRTC workers]).
int64_t nvrtc_workers_started();

}  // namespace kiln::inductor::cuda
