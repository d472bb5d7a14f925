// CUDA C -> cubin through NVRTC. libnvrtc is loaded with dlopen at first use
// (never linked), so libkiln loads on machines without CUDA; only this
// file's .cpp sees NVRTC's header.
#pragma once

#include <string>
#include <vector>

namespace kiln::inductor::cuda {

// True when libnvrtc can be loaded; otherwise `why` (when given) says
// which libraries were tried.
bool nvrtc_available(std::string* why = nullptr);

// The loaded NVRTC's version, e.g. "13.0". Throws CudaError without NVRTC.
std::string nvrtc_version();

// The options compile_cubin passes NVRTC for `arch`; the cubin cache's key
// hashes them, so changing them orphans every cached cubin.
std::vector<std::string> nvrtc_options(const std::string& arch);

// The path libnvrtc was loaded from (Note [Finding libnvrtc]), which
// worker processes load too. Throws CudaError without NVRTC.
std::string nvrtc_library_path();

// Compiles `source` (no headers included) for `arch` ("sm_90a", "sm_80")
// with nvrtc_options(arch) in this process and returns the cubin, with
// NVRTC's warnings in `messages` (when given). Throws CudaError naming the
// failure, with the compiler's log when there is one.
std::string compile_cubin_here(const std::string& source, const std::string& arch, std::string* messages = nullptr);

// compile_cubin_here, run in one of kiln's NVRTC worker processes when
// they can be used (Note [NVRTC workers], nvrtc_workers.cpp), else in this
// process; NVRTC's warnings go to KILN_LOGS=kernels. Uncached: the runtime
// path goes through cubin_cache.h's cached_cubin.
std::string compile_cubin(const std::string& source, const std::string& arch);

}  // namespace kiln::inductor::cuda
