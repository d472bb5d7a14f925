// A Kernel compiled for a CUDA architecture, and the process's memory cache
// of them: identical kernels (the same source for the same architecture)
// compile once; a memory miss takes the cubin from the disk cache
// (cubin_cache.h) or NVRTC.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_driver.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {

// A kernel's source, its cubin, and its entries loaded per device.
struct CudaKernel {
  CudaSource source;
  std::string arch;   // e.g. "sm_90a"
  std::string cubin;

  // The scalar (or, with `vector`, the vector) entry loaded on `device`;
  // loads the module there on first use (once for both entries).
  // Thread-safe. Throws CudaError.
  CudaFunction function(int device, bool vector) const;

 private:
  mutable std::mutex mutex_;
  mutable std::vector<CudaModule> modules_;            // per device index
  mutable std::vector<CudaFunction> scalar_, vector_;  // per device index
};

// The NVRTC target of a device of compute capability major.minor: "sm_90a"
// on Hopper (9.0, for its architecture-specific instructions), else "sm_XY".
std::string arch_for_capability(int major, int minor);

// The CUDA target of `device` (arch_for_capability of its compute
// capability), asked once per device. Throws CudaError.
std::string device_arch(int device);

// `kernel` compiled for `arch`: from the memory cache when an identical
// source was compiled for it before, else its cubin from the disk cache or
// NVRTC (cached_cubin); `compiled_now` says whether NVRTC ran for it in this
// call. Thread-safe. Throws CudaError.
std::shared_ptr<const CudaKernel> compile_cuda_cached(const Kernel& kernel, const std::string& arch,
                                                      bool* compiled_now = nullptr);

// compile_cuda_cached with the source laid out as `config` says (Note [CUDA
// launch configurations]); the default configuration gives the same kernel
// as above. Throws CudaError (a configuration the kernel cannot take too).
std::shared_ptr<const CudaKernel> compile_cuda_cached(const Kernel& kernel, const std::string& arch,
                                                      const LaunchConfig& config, bool* compiled_now = nullptr);

// Forgets the memory cache's kernels (those handed out stay valid): the
// next compile_cuda_cached of each goes to the disk cache, as in a new
// process.
void clear_cuda_kernel_memory_cache();

// Counters of compile_cuda_cached since the process started (the disk and
// NVRTC ones are cubin_cache_counts()'s, so they include direct calls of
// cached_cubin).
struct CudaKernelCacheCounts {
  int64_t compiled = 0;       // NVRTC runs
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t disk_rejected = 0;  // damaged or foreign cubin entries, recompiled
};

// A snapshot of the counters.
CudaKernelCacheCounts cuda_kernel_cache_counts();

}  // namespace kiln::inductor::cuda
