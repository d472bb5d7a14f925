#include "inductor/cuda/cuda_kernel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "inductor/cuda/cubin_cache.h"
#include "inductor/cuda/cuda_program.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/cuda/nvrtc_workers.h"
#include "inductor/kernel_manifest.h"
#include "base/log.h"
#include "base/parallel_for.h"
#include "base/stopwatch.h"

namespace kiln::inductor::cuda {
namespace {

std::atomic<int64_t> g_memory_hits{0};

// Kernels a program at most, unless KILN_NVRTC_KERNELS_PER_PROGRAM says
// (Note [Kernels compiled together]).
constexpr size_t kDefaultKernelsPerProgram = 8;

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

CudaModule CubinModules::on(int device, const std::string& cubin, const std::string& what) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0) throw CudaError("no CUDA device index given");
  if (static_cast<size_t>(device) >= modules_.size()) modules_.resize(device + 1, nullptr);
  if (modules_[device] == nullptr) {
    const base::Stopwatch clock;
    modules_[device] = load_module(cubin, device);
    KILN_LOG(perf, "CUDA module of " << what << " loaded on device " << device << ": " << clock.ms() << " ms");
  }
  return modules_[device];
}

CudaFunction CudaKernel::function(int device, bool vector) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0) throw CudaError("no CUDA device index given");
  if (static_cast<size_t>(device) >= scalar_.size()) {
    scalar_.resize(device + 1, nullptr);
    vector_.resize(device + 1, nullptr);
  }
  std::vector<CudaFunction>& loaded = vector ? vector_ : scalar_;
  if (loaded[device] == nullptr) {
    const std::string& name = vector ? source.vector.name : source.scalar.name;
    if (name.empty()) throw CudaError("this kernel has no vector entry");
    loaded[device] = module_function(modules->on(device, cubin, name), name, device);
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
  CudaKernelResult result = std::move(compile_cuda_kernels({CudaKernelRequest{&kernel, config}}, arch, 1)[0]);
  if (!result.kernel) throw CudaError(result.error);
  if (compiled_now != nullptr) *compiled_now = result.compiled_now;
  return result.kernel;
}

size_t kernels_per_program(size_t misses) {
  static const size_t most = [] {
    if (const char* text = std::getenv("KILN_NVRTC_KERNELS_PER_PROGRAM"); text && *text) {
      char* end = nullptr;
      const long n = std::strtol(text, &end, 10);
      if (*end == '\0' && n > 0) return static_cast<size_t>(n);
      KILN_LOG(kernels, "KILN_NVRTC_KERNELS_PER_PROGRAM=" << text << " is no positive number: ignored");
    }
    return kDefaultKernelsPerProgram;
  }();
  const size_t programs = 2 * static_cast<size_t>(std::max(1, nvrtc_worker_limit()));
  return std::clamp<size_t>((misses + programs - 1) / programs, 1, most);
}

namespace {

// One compile_cuda_kernels call: its requests, their sources, results.
class KernelBatch {
 public:
  KernelBatch(const std::vector<CudaKernelRequest>& requests, std::string arch)
      : requests_(requests), arch_(std::move(arch)), sources_(requests.size()), out_(requests.size()) {}

  std::vector<CudaKernelResult> run(size_t threads);

 private:
  std::shared_ptr<CudaKernel> make(CudaSource source, std::string cubin,
                                   std::shared_ptr<const CubinModules> modules) const;
  void compile_program(const std::vector<size_t>& members);

  const std::vector<CudaKernelRequest>& requests_;
  const std::string arch_;
  std::vector<CudaSource> sources_;
  std::vector<CudaKernelResult> out_;
  std::vector<std::shared_ptr<CudaKernel>> made_;  // per request: compiled or read here
  std::vector<char> from_nvrtc_;  // per request; not vector<bool>: threads write neighbours
};

// A kernel of `cubin`, sharing `modules` with the other kernels of its
// program (a module of its own when null).
std::shared_ptr<CudaKernel> KernelBatch::make(CudaSource source, std::string cubin,
                                              std::shared_ptr<const CubinModules> modules) const {
  auto kernel = std::make_shared<CudaKernel>();
  kernel->source = std::move(source);
  kernel->arch = arch_;
  kernel->cubin = std::move(cubin);
  if (modules) kernel->modules = std::move(modules);
  return kernel;
}

// Compiles the kernels `members` (indices of requests) as one program; when
// NVRTC refuses a program of several, each alone, so that the error names
// its kernel and the others still compile.
void KernelBatch::compile_program(const std::vector<size_t>& members) {
  std::vector<CudaSource> sources;
  for (size_t i : members) sources.push_back(sources_[i]);
  const base::Stopwatch clock;
  std::vector<CudaSource> renamed;
  std::string cubin;
  try {
    cubin = compile_cubin(program_of_sources(sources, &renamed), arch_);
  } catch (const std::exception& e) {
    if (members.size() == 1) {
      out_[members[0]].error = e.what();
      return;
    }
    KILN_LOG(kernels, "NVRTC refused a program of " << members.size() << " kernels; compiling each alone: "
                                                    << e.what());
    for (size_t i : members) compile_program({i});
    return;
  }
  count_compiled(static_cast<int64_t>(members.size()));
  const double ms = clock.ms();
  KILN_LOG(perf, "NVRTC program of " << members.size() << " kernel(s) for " << arch_ << ": " << ms << " ms ("
                                      << [&] {
                                           std::string names;
                                           for (size_t i : members) {
                                             names += (names.empty() ? "" : ", ") + sources_[i].scalar.name + " " +
                                                      std::to_string(sources_[i].text.size()) + " bytes";
                                           }
                                           return names;
                                         }()
                                      << ")");
  auto modules = std::make_shared<CubinModules>();
  for (size_t j = 0; j < members.size(); ++j) {
    const size_t i = members[j];
    store_cubin(sources_[i].text, arch_, StoredCubin{cubin, renamed[j].scalar.name}, ms);
    made_[i] = make(std::move(renamed[j]), cubin, modules);
    from_nvrtc_[i] = 1;
  }
}

std::vector<CudaKernelResult> KernelBatch::run(size_t threads) {
  MemoryCache& cache = memory_cache();
  made_.assign(requests_.size(), nullptr);
  from_nvrtc_.assign(requests_.size(), 0);
  // The first request of each source missing from the memory cache; a
  // repeat (identical layers) takes the first's kernel.
  std::vector<size_t> misses;
  std::vector<std::pair<size_t, size_t>> repeats;
  std::unordered_map<std::string, size_t> first_of;
  for (size_t i = 0; i < requests_.size(); ++i) {
    try {
      sources_[i] = generate_cuda_source(*requests_[i].kernel, requests_[i].config);
    } catch (const std::exception& e) {
      out_[i].error = e.what();
      continue;
    }
    if (kernel_manifest_on()) record_manifest_entry(*requests_[i].kernel, arch_, requests_[i].config, sources_[i].text);
    out_[i].words = layout_words(*requests_[i].kernel, sources_[i]);
    std::string key = arch_ + '\n' + sources_[i].text;
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      auto found = cache.kernels.find(key);
      if (found != cache.kernels.end()) {
        ++g_memory_hits;
        out_[i].kernel = found->second;
        continue;
      }
    }
    auto [first, inserted] = first_of.emplace(std::move(key), i);
    if (inserted) {
      misses.push_back(i);
    } else {
      repeats.emplace_back(i, first->second);
    }
  }
  // The disk cache; kernels of one program read from it share one module.
  std::vector<size_t> to_compile;
  std::unordered_map<std::string, std::shared_ptr<const CubinModules>> modules_of;
  for (size_t i : misses) {
    const CudaSource& source = sources_[i];
    KILN_LOG(kernels, "CUDA source of " << requests_[i].kernel->name << " for " << arch_ << ":\n" << source.text);
    if (source.empty) {
      made_[i] = make(source, "", nullptr);
      continue;
    }
    StoredCubin stored;
    if (!read_cached_cubin(source.text, source.scalar.name, arch_, &stored)) {
      to_compile.push_back(i);
      continue;
    }
    CudaSource named = source;
    if (stored.entry_name != source.scalar.name) {
      named.scalar.name = stored.entry_name;
      if (!named.vector.name.empty()) named.vector.name = stored.entry_name + "_vec";
    }
    std::shared_ptr<const CubinModules>& modules = modules_of[stored.cubin];
    if (!modules) modules = std::make_shared<CubinModules>();
    made_[i] = make(std::move(named), std::move(stored.cubin), modules);
  }
  // NVRTC, a few kernels a program, the programs on up to `threads` threads.
  std::vector<std::vector<size_t>> programs;
  const size_t per_program = kernels_per_program(to_compile.size());
  for (size_t k = 0; k < to_compile.size(); k += per_program) {
    programs.emplace_back(to_compile.begin() + k, to_compile.begin() + std::min(to_compile.size(), k + per_program));
  }
  base::parallel_for(programs.size(), threads, [&](size_t p) { compile_program(programs[p]); });
  // Into the memory cache: a kernel another call put there first wins (its
  // NVRTC run or disk read here is still counted by the cubin cache).
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    for (size_t i : misses) {
      if (!made_[i]) continue;
      auto [it, inserted] = cache.kernels.emplace(arch_ + '\n' + sources_[i].text, made_[i]);
      out_[i].kernel = it->second;
      out_[i].compiled_now = inserted && from_nvrtc_[i];
    }
  }
  for (const auto& [i, first] : repeats) {
    if (out_[first].kernel) ++g_memory_hits;
    out_[i].kernel = out_[first].kernel;
    out_[i].error = out_[first].error;
  }
  return std::move(out_);
}

}  // namespace

std::vector<CudaKernelResult> compile_cuda_kernels(const std::vector<CudaKernelRequest>& requests,
                                                   const std::string& arch, size_t threads) {
  return KernelBatch(requests, arch).run(threads);
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
  counts.programs = cubins.programs;
  counts.memory_hits = g_memory_hits;
  counts.disk_hits = cubins.disk_hits;
  counts.disk_rejected = cubins.disk_rejected;
  return counts;
}

}  // namespace kiln::inductor::cuda
