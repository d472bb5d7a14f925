// The CUDA driver API, loaded with dlopen("libcuda.so.1") at first use:
// modules from cubins, their functions, and launches on a given stream in
// the device's primary context (the one torch uses). Only this file's .cpp
// sees cuda.h. Every failure is a CudaError naming the driver call and its
// CUresult's name; nothing here aborts the process.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::inductor::cuda {

// A loaded module (a CUmodule) and one of its functions (a CUfunction),
// valid for the process.
using CudaModule = void*;
using CudaFunction = void*;

// True when libcuda loads and cuInit succeeds; otherwise `why` (when
// given) says what failed.
bool cuda_driver_available(std::string* why = nullptr);

// Compute capability (major, minor) of device `device`. Throws CudaError.
void device_capability(int device, int* major, int* minor);

// Loads `cubin` into `device`'s primary context; the module stays loaded
// for the process. Throws CudaError.
CudaModule load_module(const std::string& cubin, int device);

// The function `name` of `module` (loaded on `device`). Throws CudaError.
CudaFunction module_function(CudaModule module, const std::string& name, int device);

// Launches `function` of `device` on `stream` (a cudaStream_t, 0 for the
// legacy default stream) with `grid` x `block` threads; `args[i]` points at
// the i-th parameter's value. Makes the device's primary context current
// for the call when another one is. Throws CudaError.
void launch_function(CudaFunction function, int device, int64_t grid, int block, void* stream, void** args);

// Milliseconds per launch of `function` (as launch_function launches it),
// timed with CUDA events on `stream` around `reps` back-to-back launches
// after `warmup` untimed ones; waits for them to finish. Throws CudaError.
double time_launches(CudaFunction function, int device, int64_t grid, int block, void* stream, void** args,
                     int warmup, int reps);

// True when `stream` (of `device`) is capturing a CUDA graph, when work
// queued on it is recorded rather than run (and events cannot be waited on).
// Throws CudaError.
bool stream_capturing(int device, void* stream);

}  // namespace kiln::inductor::cuda
