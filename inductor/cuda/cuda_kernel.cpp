#include "inductor/cuda/cuda_kernel.h"

#include <atomic>
#include <map>
#include <unordered_map>

#include "inductor/cuda/cubin_cache.h"
#include "inductor/kernel_manifest.h"
#include "base/log.h"
#include "base/stopwatch.h"

namespace kiln::inductor::cuda {
namespace {

std::atomic<int64_t> g_memory_hits{0};

// The memory cache, keyed by architecture and source text; never freed
// (modules stay loaded).
struct MemoryCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const CudaKernel>> kernels;
};

MemoryCache& memory_cache() {
  static MemoryCache* made = new MemoryCache();
  return *made;
}

}  // namespace

CudaFunction CudaKernel::function(int device, bool vector) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0) throw CudaError("no CUDA device index given");
  if (static_cast<size_t>(device) >= modules_.size()) {
    modules_.resize(device + 1, nullptr);
    scalar_.resize(device + 1, nullptr);
    vector_.resize(device + 1, nullptr);
  }
  std::vector<CudaFunction>& loaded = vector ? vector_ : scalar_;
  if (loaded[device] == nullptr) {
    const std::string& name = vector ? source.vector.name : source.scalar.name;
    if (name.empty()) throw CudaError("this kernel has no vector entry");
    if (modules_[device] == nullptr) {
      const base::Stopwatch clock;
      modules_[device] = load_module(cubin, device);
      KILN_LOG(perf, "CUDA module of " << name << " loaded on device " << device << ": " << clock.ms() << " ms");
    }
    loaded[device] = module_function(modules_[device], name, device);
  }
  return loaded[device];
}

std::string arch_for_capability(int major, int minor) {
  const std::string sm = "sm_" + std::to_string(major) + std::to_string(minor);
  return major == 9 && minor == 0 ? sm + "a" : sm;
}

std::string device_arch(int device) {
  static std::mutex mutex;
  static std::map<int, std::string> arches;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = arches.find(device);
  if (found != arches.end()) return found->second;
  int major = 0, minor = 0;
  device_capability(device, &major, &minor);
  return arches[device] = arch_for_capability(major, minor);
}

namespace {

// Note [Kernel replay] in inductor/kernel_manifest.cpp: the kernel's text
// and launch configuration, and its source with the kernel's (process
// specific) name left out.
void record_manifest_entry(const Kernel& kernel, const std::string& arch, const LaunchConfig& config,
                           const std::string& source) {
  Kernel unnamed = kernel;
  unnamed.name = "";
  record_kernel("cuda", arch + "\n" + format_launch_config(config) + "\n" + format_kernel(unnamed), [&] {
    std::string code = source;
    if (kernel.name.empty()) return code;
    const std::string stand_in = "kernel";
    for (size_t at = code.find(kernel.name); at != std::string::npos;
         at = code.find(kernel.name, at + stand_in.size())) {
      code.replace(at, kernel.name.size(), stand_in);
    }
    return code;
  });
}

}  // namespace

std::shared_ptr<const CudaKernel> compile_cuda_cached(const Kernel& kernel, const std::string& arch,
                                                      bool* compiled_now) {
  return compile_cuda_cached(kernel, arch, default_launch_config(kernel), compiled_now);
}

std::shared_ptr<const CudaKernel> compile_cuda_cached(const Kernel& kernel, const std::string& arch,
                                                      const LaunchConfig& config, bool* compiled_now) {
  MemoryCache& cache = memory_cache();
  const base::Stopwatch clock;
  CudaSource source = generate_cuda_source(kernel, config);
  const std::string key = arch + '\n' + source.text;
  if (kernel_manifest_on()) record_manifest_entry(kernel, arch, config, source.text);
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto found = cache.kernels.find(key);
    if (found != cache.kernels.end()) {
      ++g_memory_hits;
      if (compiled_now != nullptr) *compiled_now = false;
      return found->second;
    }
  }
  KILN_LOG(kernels, "CUDA source of " << kernel.name << " for " << arch << ":\n" << source.text);
  auto compiled = std::make_shared<CudaKernel>();
  CubinOrigin origin = CubinOrigin::Disk;
  compiled->cubin = source.empty ? std::string() : cached_cubin(source.text, source.scalar.name, arch, &origin);
  KILN_LOG(perf, "CUDA kernel " << kernel.name << " for " << arch << ": " << clock.ms() << " ms ("
                                << (origin == CubinOrigin::Compiled ? "NVRTC" : "cubin from disk") << ")");
  compiled->source = std::move(source);
  compiled->arch = arch;
  std::lock_guard<std::mutex> lock(cache.mutex);
  // A thread that lost the race returns the winner's kernel; its NVRTC run
  // or disk read is still counted by the cubin cache.
  auto [it, inserted] = cache.kernels.emplace(key, std::move(compiled));
  if (compiled_now != nullptr) *compiled_now = inserted && origin == CubinOrigin::Compiled;
  return it->second;
}

void clear_cuda_kernel_memory_cache() {
  MemoryCache& cache = memory_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.kernels.clear();
}

CudaKernelCacheCounts cuda_kernel_cache_counts() {
  const CubinCacheCounts cubins = cubin_cache_counts();
  CudaKernelCacheCounts counts;
  counts.compiled = cubins.compiled;
  counts.memory_hits = g_memory_hits;
  counts.disk_hits = cubins.disk_hits;
  counts.disk_rejected = cubins.disk_rejected;
  return counts;
}

}  // namespace kiln::inductor::cuda
