// Runs a compiled CUDA kernel on torch tensors: binds the inputs' element
// pointers, allocates the outputs with torch.empty_strided on the kernel's
// device and launches on torch's current stream of that device; and, for
// mode="max-autotune", times a kernel's launch configurations there.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "inductor/cuda/cuda_kernel.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {

// Runs `compiled` (made from `kernel`, or from another kernel of the same
// source text) on CUDA device `device`: inputs[i] (borrowed) is kernel
// input i, a tensor of that input's dtype on that device whose storage
// holds every element the input's strides reach; `words` are `kernel`'s
// run-time layout words (CudaKernelResult::words; empty for a constant
// layout).
// Returns a new reference to the tuple of outputs (each output's tensor
// sizes, strides and dtype), or null with a Python error set (TypeError
// for a wrong input, RuntimeError for a driver failure). The launch is
// asynchronous, ordered on the current stream like torch's own kernels.
PyObject* run_cuda_kernel(const CudaKernel& compiled, const Kernel& kernel, int device, PyObject* const* inputs,
                          const std::vector<int64_t>& words);

// What tune_cuda_kernel chose.
struct TunedKernel {
  std::shared_ptr<const CudaKernel> kernel;  // null: a Python error is set
  bool timed = false;  // candidates were timed now (not a cached choice)
  bool final = true;   // false: the default, untimed (a CUDA graph was being captured): tune at a later launch
};

// mode="max-autotune" (Note [CUDA autotuning] in cuda_autotune.cpp): the
// compiled kernel of `kernel`'s fastest launch configuration on `device`,
// timing every candidate over `inputs` (as run_cuda_kernel takes them) and
// scratch outputs unless a choice for an identical kernel is cached.
// Blocks until the timed launches finish. Candidates that fail are
// skipped; a Python error (RuntimeError, TypeError) only when even the
// default cannot be had.
TunedKernel tune_cuda_kernel(const Kernel& kernel, int device, PyObject* const* inputs);

}  // namespace kiln::inductor::cuda
