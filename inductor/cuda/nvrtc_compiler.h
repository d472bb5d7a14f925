// CUDA C -> cubin through NVRTC. libnvrtc is loaded with dlopen at first use
// (never linked), so libkiln loads on machines without CUDA; only this
// file's .cpp sees NVRTC's header.
#pragma once

#include <string>

namespace kiln::inductor::cuda {

// True when libnvrtc can be loaded; otherwise `why` (when given) says
// which libraries were tried.
bool nvrtc_available(std::string* why = nullptr);

// The loaded NVRTC's version, e.g. "13.0". Throws CudaError without NVRTC.
std::string nvrtc_version();

// Compiles `source` (no headers included) for `arch` ("sm_90a", "sm_80")
// and returns the cubin. Throws CudaError naming the failure, with the
// compiler's log when there is one.
std::string compile_cubin(const std::string& source, const std::string& arch);

}  // namespace kiln::inductor::cuda
