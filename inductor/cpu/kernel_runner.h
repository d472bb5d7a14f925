// Runs a compiled kernel on torch tensors: binds the inputs' element
// pointers, allocates the outputs with torch.empty_strided and calls the
// kernel with the GIL released, split over kiln's thread pool when large.
#pragma once

#include <Python.h>

#include <cstdint>

#include "inductor/cpu/cpu_kernel.h"
#include "inductor/kernel_ir.h"

namespace kiln::inductor::cpu {

// Runs `compiled` (made from `kernel`): inputs[i] (borrowed) is kernel input
// i, a CPU tensor of that input's dtype whose storage holds every element
// the input's strides reach. Returns a new reference to the tuple of
// outputs (each output's tensor sizes, strides and dtype), or null with a
// Python error set (TypeError for a wrong input). `threads` <= 0: as many
// as torch.get_num_threads(). With `reuse`, output i is written into the
// storage of the dead tensor reuse[i] where that is not null (Note [Buffer
// reuse] in inductor/buffer_plan.cpp), else allocated.
PyObject* run_cpu_kernel(const CpuKernel& compiled, const Kernel& kernel, PyObject* const* inputs,
                         int threads = 0, PyObject* const* reuse = nullptr);

// Calls `compiled` over the whole iteration space on `data`, split into
// up to `threads` ranges of its parallel dim run on kiln's thread pool
// (one call on this thread for kernels under kParallelMinElements).
void call_cpu_kernel(const CpuKernel& compiled, const Kernel& kernel, char* const* data, int threads);

// torch.get_num_threads(), or 1 when it cannot be asked: how many threads
// kernels run on. Needs the GIL.
int torch_thread_count();

// Kernels with fewer points run on the calling thread.
constexpr int64_t kParallelMinElements = 32768;

}  // namespace kiln::inductor::cpu
