// Runs generated CUDA C on the host, for tests on machines without a GPU
// (Note [Host emulation of CUDA kernels] in cuda_host_emulator.cpp): the
// source is compiled by the host's g++ beside a shim that defines CUDA's
// thread indices, __syncthreads, warp shuffles and device intrinsics, and
// each CUDA thread of a block runs as one std::thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_source.h"

namespace kiln::test {

// A CudaSource compiled for the host.
class HostKernel {
 public:
  HostKernel(const HostKernel&) = delete;
  HostKernel& operator=(const HostKernel&) = delete;

  // Compiles `source` (both entries); null with `error` set when g++ fails.
  static std::unique_ptr<HostKernel> compile(const inductor::cuda::CudaSource& source, std::string* error);

  // Compiles every source of `sources` in one g++ run (each in a namespace
  // of its own; one compile costs about a second, so tests of many launch
  // configurations batch them). Empty with `error` set when g++ fails.
  static std::vector<std::unique_ptr<HostKernel>> compile_all(const std::vector<inductor::cuda::CudaSource>& sources,
                                                              std::string* error);

  // Runs the vector (or scalar) entry over `grid` blocks of `block`
  // threads, one block after another; args[i] is the i-th pointer (a
  // scalar argument: a pointer to its value).
  void run(bool vector, void** args, unsigned grid, unsigned block) const;

 private:
  HostKernel() = default;
  std::shared_ptr<void> library_;  // dlclose'd with the last kernel of a compile_all
  void (*scalar_)(void**, unsigned, unsigned) = nullptr;
  void (*vector_)(void**, unsigned, unsigned) = nullptr;
};

// True when `g++` can be run (the emulator needs it).
bool host_compiler_available();

}  // namespace kiln::test
