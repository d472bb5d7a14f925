// Runs a compiled CUDA kernel on torch tensors: binds the inputs' element
// pointers, allocates the outputs with torch.empty_strided on the kernel's
// device and launches on torch's current stream of that device.
#pragma once

#include <Python.h>

#include "inductor/cuda/cuda_kernel.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cuda {

// Runs `compiled` (made from `kernel`) on CUDA device `device`: inputs[i]
// (borrowed) is kernel input i, a tensor of that input's dtype on that
// device whose storage holds every element the input's strides reach.
// Returns a new reference to the tuple of outputs (each output's tensor
// sizes, strides and dtype), or null with a Python error set (TypeError
// for a wrong input, RuntimeError for a driver failure). The launch is
// asynchronous, ordered on the current stream like torch's own kernels.
PyObject* run_cuda_kernel(const CudaKernel& compiled, const Kernel& kernel, int device, PyObject* const* inputs);

}  // namespace kiln::inductor::cuda
