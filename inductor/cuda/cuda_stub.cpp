// Stands in for nvrtc_compiler.cpp and cuda_driver.cpp in builds without
// the CUDA toolkit's headers (KILN_WITH_CUDA=OFF): CUDA kernels are
// unavailable, and asking for them says why.
#include "inductor/cuda/cuda_driver.h"
#include "inductor/cuda/cuda_source.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/cuda/nvrtc_workers.h"

namespace kiln::inductor::cuda {
namespace {

constexpr const char* kWhy = "kiln was built without the CUDA toolkit (KILN_WITH_CUDA=OFF)";

}  // namespace

bool nvrtc_available(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

std::string nvrtc_version() { throw CudaError(kWhy); }

std::string compile_cubin(const std::string&, const std::string&) { throw CudaError(kWhy); }

std::string compile_cubin_here(const std::string&, const std::string&, std::string*) { throw CudaError(kWhy); }

std::string nvrtc_library_path() { throw CudaError(kWhy); }

int nvrtc_worker_limit() { return 0; }

std::string nvrtc_worker_program(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return "";
}

std::string compile_cubin_in_worker(const std::string&, const std::string&, std::string*) { throw CudaError(kWhy); }

std::vector<int> idle_nvrtc_workers() { return {}; }

int64_t nvrtc_workers_started() { return 0; }

bool cuda_driver_available(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

void device_capability(int, int*, int*) { throw CudaError(kWhy); }

CudaModule load_module(const std::string&, int) { throw CudaError(kWhy); }

CudaFunction module_function(CudaModule, const std::string&, int) { throw CudaError(kWhy); }

void launch_function(CudaFunction, int, int64_t, int, void*, void**) { throw CudaError(kWhy); }

double time_launches(CudaFunction, int, int64_t, int, void*, void**, int, int) { throw CudaError(kWhy); }

bool stream_capturing(int, void*) { throw CudaError(kWhy); }

}  // namespace kiln::inductor::cuda
