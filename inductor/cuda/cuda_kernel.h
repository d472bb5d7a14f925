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

// A cubin's module per device, loaded at first use: one for all the
// kernels compiled in one NVRTC program (Note [Kernels compiled together]
// in cuda_program.cpp).
class CubinModules {
 public:
  // `cubin`'s module on `device` (`what` names it in the perf log).
  // Thread-safe. Throws CudaError.
  CudaModule on(int device, const std::string& cubin, const std::string& what) const;

 private:
  mutable std::mutex mutex_;
  mutable std::vector<CudaModule> modules_;  // per device index
};

// A kernel's source, its cubin, and its entries loaded per device.
struct CudaKernel {
  CudaSource source;  // the kernel's own text; entry names as the cubin has them
  std::string arch;   // e.g. "sm_90a"
  std::string cubin;  // of the kernel's program (maybe holding other kernels)
  std::shared_ptr<const CubinModules> modules = std::make_shared<CubinModules>();

  // The scalar (or, with `vector`, the vector) entry loaded on `device`;
  // loads the module there on first use (once for both entries).
  // Thread-safe. Throws CudaError.
  CudaFunction function(int device, bool vector) const;

 private:
  mutable std::mutex mutex_;
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

// A kernel to compile, and the configuration to write it in.
struct CudaKernelRequest {
  const Kernel* kernel = nullptr;
  LaunchConfig config;
};

// What compile_cuda_kernels made of one request: the kernel, or why not.
struct CudaKernelResult {
  std::shared_ptr<const CudaKernel> kernel;  // null when `error` says why
  bool compiled_now = false;                 // NVRTC ran for it in this call
  std::string error;
  // What a launch of this request's kernel passes after the pointers
  // (layout_words of its own source: `kernel` may have been written for
  // another kernel of the same text). Empty for a constant layout.
  std::vector<int64_t> words;
};

// Each request compiled for `arch` as compile_cuda_cached would, but the
// kernels missing from both caches compiled a few to an NVRTC program
// (Note [Kernels compiled together] in cuda_program.cpp), the programs on
// up to `threads` threads. Results in the requests' order; a kernel that
// cannot be written or compiled gets its error and leaves the others
// alone. Thread-safe.
std::vector<CudaKernelResult> compile_cuda_kernels(const std::vector<CudaKernelRequest>& requests,
                                                   const std::string& arch, size_t threads);

// The most kernels compile_cuda_kernels puts in one program when `misses`
// kernels need NVRTC: enough programs to keep every NVRTC worker busy
// twice over, at most KILN_NVRTC_KERNELS_PER_PROGRAM (default 8; 1
// compiles each kernel alone).
size_t kernels_per_program(size_t misses);

// Forgets the memory cache's kernels (those handed out stay valid): the
// next compile_cuda_cached of each goes to the disk cache, as in a new
// process.
void clear_cuda_kernel_memory_cache();

// Counters of compile_cuda_cached since the process started (the disk and
// NVRTC ones are cubin_cache_counts()'s, so they include direct calls of
// cached_cubin).
struct CudaKernelCacheCounts {
  int64_t compiled = 0;       // kernels NVRTC compiled
  int64_t programs = 0;       // NVRTC runs (several kernels each, maybe)
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t disk_rejected = 0;  // damaged or foreign cubin entries, recompiled
};

// A snapshot of the counters.
CudaKernelCacheCounts cuda_kernel_cache_counts();

}  // namespace kiln::inductor::cuda
