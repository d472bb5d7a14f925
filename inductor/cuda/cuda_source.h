// Kernel IR -> CUDA C source text (Note [CUDA kernels] in cuda_source.cpp):
// one translation unit per Kernel, needing no CUDA header, compiled by
// NVRTC (nvrtc_compiler.h) and launched by cuda_kernel_runner.h. Pure
// text: no CUDA library is touched here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {

// Thrown when a kernel cannot be written as CUDA C (an invalid kernel, a
// dtype CUDA kernels do not handle) or cannot be compiled or launched.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One __global__ function of the source and how to launch it.
struct CudaEntry {
  std::string name;   // extern "C" symbol; "" when the source has no such variant
  int block = 0;      // threads per block
  int64_t grid = 0;   // blocks (every kernel loops over its work grid-stride)
};

// Note [CUDA kernel ABI]
// Every entry takes one pointer per kernel input (its first element; the
// Kernel's input offset is compiled in), then one per output, in order.
// `vector` (pointwise kernels, and row reductions whose rows are
// contiguous) reads and writes 16 bytes per access and may be launched
// only when the pointer of every operand whose innermost stride is 1 is
// aligned to `vector_width` elements of its dtype; `scalar` runs everywhere.
struct CudaSource {
  std::string text;       // the translation unit
  CudaEntry scalar;
  CudaEntry vector;       // name "" when the kernel does not allow it
  int vector_width = 0;   // elements per vector access
  bool empty = false;     // no point to compute: nothing is launched
};

// Writes `kernel` as CUDA C. `kernel` must pass verify(). Throws CudaError.
CudaSource generate_cuda_source(const Kernel& kernel);

}  // namespace kiln::inductor::cuda
