// Runs a compiled pointwise kernel on torch tensors: binds the inputs'
// element pointers, allocates the outputs with torch.empty_strided and
// calls the kernel on this thread. For tests and benchmarks until the
// inductor backend has its executor.
#pragma once

#include <Python.h>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cpu {

// Runs `compiled` (made from `kernel`): inputs[i] (borrowed) is kernel input
// i, a CPU tensor of that input's dtype whose storage holds every element
// the input's strides reach. Returns a new reference to the tuple of
// outputs (sizes Kernel::sizes, each output's dtype and strides), or null
// with a Python error set (TypeError for a wrong input).
PyObject* run_cpu_kernel(const CpuKernel& compiled, const Kernel& kernel, PyObject* const* inputs);

}  // namespace kiln::inductor::cpu
