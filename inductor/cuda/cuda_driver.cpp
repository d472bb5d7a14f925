// libcuda through dlopen. Entry points are resolved by the names cuda.h
// maps them to (cuCtxPushCurrent is cuCtxPushCurrent_v2), so the symbols
// match the header's types.
#include "inductor/cuda/cuda_driver.h"

#include <cuda.h>
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "inductor/cuda/cuda_source.h"

namespace kiln::inductor::cuda {
namespace {

#define KILN_CU_NAME_(fn) #fn
#define KILN_CU_NAME(fn) KILN_CU_NAME_(fn)

// X(function): every driver entry point kiln calls, written once.
#define KILN_CU_FUNCTIONS(X)   \
  X(cuInit)                    \
  X(cuGetErrorName)            \
  X(cuDeviceGet)               \
  X(cuDeviceGetAttribute)      \
  X(cuDevicePrimaryCtxRetain)  \
  X(cuCtxGetCurrent)           \
  X(cuCtxPushCurrent)          \
  X(cuCtxPopCurrent)           \
  X(cuModuleLoadData)          \
  X(cuModuleGetFunction)       \
  X(cuLaunchKernel)            \
  X(cuEventCreate)             \
  X(cuEventRecord)             \
  X(cuEventSynchronize)        \
  X(cuEventElapsedTime)        \
  X(cuEventDestroy)            \
  X(cuStreamIsCapturing)

struct Driver {
  void* handle = nullptr;
  std::string error;  // why it is missing
#define KILN_CU_MEMBER(fn) decltype(&::fn) fn = nullptr;
  KILN_CU_FUNCTIONS(KILN_CU_MEMBER)
#undef KILN_CU_MEMBER
};

Driver load_driver() {
  Driver d;
  d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d.handle == nullptr) {
    const char* error = dlerror();
    d.error = std::string("libcuda.so.1 could not be loaded (") + (error ? error : "unknown error") +
              "): is an NVIDIA driver installed?";
    return d;
  }
  bool complete = true;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(d.handle, name));
    if (fn == nullptr) {
      complete = false;
      d.error += std::string(d.error.empty() ? "libcuda.so.1 lacks " : ", ") + name;
    }
  };
#define KILN_CU_RESOLVE(fn) resolve(d.fn, KILN_CU_NAME(fn));
  KILN_CU_FUNCTIONS(KILN_CU_RESOLVE)
#undef KILN_CU_RESOLVE
  if (!complete) {
    dlclose(d.handle);
    d.handle = nullptr;
    return d;
  }
  const CUresult init = d.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(init, &name);
    d.error = std::string("cuInit failed: ") + (name ? name : "unknown CUresult");
    d.handle = nullptr;  // the library stays loaded; nothing else is called
  }
  return d;
}

const Driver& driver() {
  static std::once_flag once;
  static Driver* loaded = nullptr;  // kept for the process
  std::call_once(once, [] { loaded = new Driver(load_driver()); });
  return *loaded;
}

const Driver& require_driver() {
  const Driver& d = driver();
  if (d.handle == nullptr) throw CudaError("CUDA kernels need the CUDA driver: " + d.error);
  return d;
}

void check(const Driver& d, CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (d.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown CUresult";
  throw CudaError(std::string(call) + " failed: " + name);
}

// The primary context of `device`, retained once for the process (torch
// uses the same one through the runtime API).
CUcontext primary_context(const Driver& d, int device) {
  static std::mutex mutex;
  static std::vector<CUcontext> contexts;
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) throw CudaError("no CUDA device index given");
  if (static_cast<size_t>(device) >= contexts.size()) contexts.resize(device + 1, nullptr);
  if (contexts[device] == nullptr) {
    CUdevice handle = 0;
    check(d, d.cuDeviceGet(&handle, device), "cuDeviceGet");
    check(d, d.cuDevicePrimaryCtxRetain(&contexts[device], handle), "cuDevicePrimaryCtxRetain");
  }
  return contexts[device];
}

// A CUevent destroyed with the scope (cuEventDestroy's result ignored:
// nothing useful can be done about it there).
class Event {
 public:
  explicit Event(const Driver& d) : d_(d) { check(d, d.cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate"); }
  ~Event() {
    if (event_ != nullptr) d_.cuEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }

 private:
  const Driver& d_;
  CUevent event_ = nullptr;
};

// Makes `device`'s primary context current for a scope, when it is not.
class ContextScope {
 public:
  ContextScope(const Driver& d, int device) : d_(d) {
    CUcontext wanted = primary_context(d, device);
    CUcontext current = nullptr;
    check(d, d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    if (current != wanted) {
      check(d, d.cuCtxPushCurrent(wanted), "cuCtxPushCurrent");
      pushed_ = true;
    }
  }
  ~ContextScope() {
    if (pushed_) {
      CUcontext popped = nullptr;
      d_.cuCtxPopCurrent(&popped);
    }
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Driver& d_;
  bool pushed_ = false;
};

}  // namespace

bool cuda_driver_available(std::string* why) {
  const Driver& d = driver();
  if (why != nullptr) *why = d.error;
  return d.handle != nullptr;
}

void device_capability(int device, int* major, int* minor) {
  const Driver& d = require_driver();
  CUdevice handle = 0;
  check(d, d.cuDeviceGet(&handle, device), "cuDeviceGet");
  check(d, d.cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle),
        "cuDeviceGetAttribute");
  check(d, d.cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle),
        "cuDeviceGetAttribute");
}

CudaModule load_module(const std::string& cubin, int device) {
  const Driver& d = require_driver();
  ContextScope scope(d, device);
  CUmodule module = nullptr;
  check(d, d.cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
  return module;
}

CudaFunction module_function(CudaModule module, const std::string& name, int device) {
  const Driver& d = require_driver();
  ContextScope scope(d, device);
  CUfunction function = nullptr;
  check(d, d.cuModuleGetFunction(&function, static_cast<CUmodule>(module), name.c_str()), "cuModuleGetFunction");
  return function;
}

void launch_function(CudaFunction function, int device, int64_t grid, int block, void* stream, void** args) {
  const Driver& d = require_driver();
  if (grid <= 0 || grid > 0x7fffffff || block <= 0 || block > 1024) {
    throw CudaError("cuLaunchKernel: launch of " + std::to_string(grid) + " blocks of " + std::to_string(block) +
                    " threads is out of range");
  }
  ContextScope scope(d, device);
  check(d,
        d.cuLaunchKernel(static_cast<CUfunction>(function), static_cast<unsigned>(grid), 1, 1,
                         static_cast<unsigned>(block), 1, 1, 0, static_cast<CUstream>(stream), args, nullptr),
        "cuLaunchKernel");
}

double time_launches(CudaFunction function, int device, int64_t grid, int block, void* stream, void** args,
                     int warmup, int reps) {
  const Driver& d = require_driver();
  if (reps < 1) throw CudaError("time_launches: no launch to time");
  ContextScope scope(d, device);
  for (int i = 0; i < warmup; ++i) launch_function(function, device, grid, block, stream, args);
  Event start(d), end(d);
  const CUstream s = static_cast<CUstream>(stream);
  check(d, d.cuEventRecord(start.get(), s), "cuEventRecord");
  for (int i = 0; i < reps; ++i) launch_function(function, device, grid, block, stream, args);
  check(d, d.cuEventRecord(end.get(), s), "cuEventRecord");
  check(d, d.cuEventSynchronize(end.get()), "cuEventSynchronize");
  float ms = 0;
  check(d, d.cuEventElapsedTime(&ms, start.get(), end.get()), "cuEventElapsedTime");
  return static_cast<double>(ms) / reps;
}

bool stream_capturing(int device, void* stream) {
  const Driver& d = require_driver();
  ContextScope scope(d, device);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(d, d.cuStreamIsCapturing(static_cast<CUstream>(stream), &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace kiln::inductor::cuda
