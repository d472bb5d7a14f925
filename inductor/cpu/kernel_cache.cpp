#include "inductor/cpu/kernel_cache.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "inductor/cpu/llvm_jit.h"
#include "inductor/kernel_cache_file.h"
#include "inductor/kernel_manifest.h"
#include "base/log.h"

namespace kiln::inductor::cpu {

// Note [Kernel cache keys]
// A key is the SHA-256 of, each as a length-prefixed field: the cache
// format version; kiln's build identity (the GNU build-id of the library
// this code is linked into, which the linker derives from the code, so a
// rebuild that changes the code generator orphans every old entry instead
// of loading stale code; without a build-id, the library's path, size and
// mtime); the host triple, CPU name and CPU features the JIT targets;
// LLVM's version; whether glibc's libmvec was found (kernels call its vector
// functions only when it was); and last the kernel's kind ("kernel" for
// Kernel IR, "gemm" for the generated matrix products) and text
// (kernel_code_text: format_kernel with the name left out, Note [Run-time
// outer size]; format_gemm_spec). Two processes of one kiln build on one machine compute the
// same key for the same kernel; anything that may change the machine code
// changes the key. The memory cache uses the same keys, so identical
// kernels of one process (the 64 layers of a model) compile once.

namespace {

// The loaded object (shared library or executable) that holds this code.
struct BuildIdSearch {
  uintptr_t address = 0;
  std::string id;  // hex
};

int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<BuildIdSearch*>(data);
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + header.p_vaddr;
    if (header.p_type == PT_LOAD && search->address >= start && search->address < start + header.p_memsz) {
      contains = true;
    }
  }
  if (!contains) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_NOTE) continue;
    const auto* at = reinterpret_cast<const uint8_t*>(info->dlpi_addr + header.p_vaddr);
    const uint8_t* end = at + header.p_memsz;
    while (at + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(at);
      const uint8_t* name = at + sizeof(ElfW(Nhdr));
      const uint8_t* desc = name + ((note->n_namesz + 3) & ~3u);
      at = desc + ((note->n_descsz + 3) & ~3u);
      if (at > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        static const char kDigits[] = "0123456789abcdef";
        for (uint32_t k = 0; k < note->n_descsz; ++k) {
          search->id += kDigits[desc[k] >> 4];
          search->id += kDigits[desc[k] & 15];
        }
        return 1;
      }
    }
  }
  return 1;
}

// kiln's build identity (Note [Kernel cache keys]).
const std::string& kiln_build_identity() {
  static const std::string identity = [] {
    BuildIdSearch search;
    search.address = reinterpret_cast<uintptr_t>(&find_build_id);
    dl_iterate_phdr(find_build_id, &search);
    if (!search.id.empty()) return "build-id " + search.id;
    Dl_info where{};
    struct stat info {};
    if (dladdr(reinterpret_cast<void*>(&find_build_id), &where) && where.dli_fname &&
        ::stat(where.dli_fname, &info) == 0) {
      return std::string("file ") + where.dli_fname + " " + std::to_string(info.st_size) + " " +
             std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec);
    }
    // Nothing identifies this build: keys stay valid for this process only.
    return "process " + std::to_string(reinterpret_cast<uintptr_t>(&search));
  }();
  return identity;
}

// Milliseconds since `start`, for the cache's log lines.
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

struct Counters {
  std::atomic<int64_t> memory_hits{0};
  std::atomic<int64_t> disk_hits{0};
  std::atomic<int64_t> compiled{0};
  std::atomic<int64_t> disk_rejected{0};
  std::atomic<int64_t> disk_writes{0};
  std::atomic<int64_t> disk_write_failures{0};
};

Counters& counters() {
  static Counters* made = new Counters();
  return *made;
}

struct DigestHash {
  size_t operator()(const Sha256Digest& digest) const {
    size_t value = 0;
    std::memcpy(&value, digest.data(), sizeof(value));  // already uniformly distributed
    return value;
  }
};

// The process's memory cache; leaked like the JIT it points into. The
// directory is kernel_cache_dir()'s, shared with the CUDA cache.
struct Cache {
  std::mutex mutex;
  std::unordered_map<Sha256Digest, CpuKernel, DigestHash> memory;
};

Cache& the_cache() {
  static Cache* made = new Cache();
  return *made;
}

// Records `kernel` (fn and symbol only) unless another thread was first;
// returns the kernel the cache holds.
CpuKernel remember(Cache& cache, const Sha256Digest& key, const CpuKernel& kernel) {
  CpuKernel slim;
  slim.fn = kernel.fn;
  slim.symbol = kernel.symbol;
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.memory.emplace(key, std::move(slim)).first->second;
}

}  // namespace

namespace {

// The key of a kernel of `kind` described by `text` (Note [Kernel cache keys]).
Sha256Digest text_cache_key(const std::string& kind, const std::string& text) {
  // Everything but the kernel is fixed for the process: hashed once, and the
  // hash state copied for each kernel (the CPU's feature list alone is ~2 KB).
  static const Sha256 prefix = [] {
    const HostCpu& host = host_cpu();
    const bool libmvec = jit_resolve_host_symbol("_ZGVdN8v_expf") != nullptr;
    Sha256 hash;
    hash.update_field("kiln cpu kernel");
    hash.update_u64(kKernelCacheFormatVersion);
    hash.update_field(kiln_build_identity());
    hash.update_field(host.triple);
    hash.update_field(host.name);
    hash.update_field(host.features);
    hash.update_field(jit_llvm_version());
    hash.update_u64(libmvec ? 1 : 0);
    return hash;
  }();
  Sha256 hash = prefix;
  hash.update_field(kind);
  hash.update_field(text);
  return hash.digest();
}

}  // namespace

Sha256Digest kernel_cache_key(const Kernel& kernel) { return text_cache_key("kernel", kernel_code_text(kernel)); }

CpuKernel compile_cached(const Kernel& kernel, KernelSource* source) {
  // Without LLVM there is nothing to key or load; this throws the usual error.
  if (!cpu_codegen_available()) return compile_cpu_kernel(kernel);
  const std::string text = kernel_code_text(kernel);
  if (kernel_manifest_on()) record_kernel("kernel", text, [&kernel] { return kernel_ir_text(kernel); });
  return compile_cached_text("kernel", text, kernel.name,
                             [&kernel] { return compile_cpu_kernel(kernel); }, source);
}

CpuKernel compile_cached_text(const std::string& kind, const std::string& text, const std::string& name,
                              const std::function<CpuKernel()>& compile, KernelSource* source) {
  if (!cpu_codegen_available()) return compile();
  Cache& cache = the_cache();
  Counters& count = counters();
  const Sha256Digest key = text_cache_key(kind, text);
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto found = cache.memory.find(key);
    if (found != cache.memory.end()) {
      ++count.memory_hits;
      if (source) *source = KernelSource::Memory;
      return found->second;
    }
  }
  const std::string dir = kernel_cache_dir();
  constexpr CacheEntryKind kKind = CacheEntryKind::CpuObject;
  const auto start = std::chrono::steady_clock::now();
  if (!dir.empty()) {
    CacheEntry entry;
    const EntryStatus status = read_cache_entry(dir, kKind, key, &entry);
    if (status == EntryStatus::Ok) {
      try {
        CpuKernel loaded;
        loaded.symbol = entry.name;
        loaded.fn = reinterpret_cast<CpuKernelFn>(jit_load_object(entry.payload, entry.name));
        ++count.disk_hits;
        if (source) *source = KernelSource::Disk;
        KILN_LOG(cache, "disk hit " << to_hex(key) << " (" << name << "), read and loaded in "
                                    << ms_since(start) << " ms");
        return remember(cache, key, loaded);
      } catch (const JitError& error) {
        ++count.disk_rejected;
        KILN_LOG(cache, "entry " << cache_entry_path(dir, kKind, key) << " does not load, recompiling: "
                                 << error.what());
      }
    } else if (status != EntryStatus::Missing) {
      ++count.disk_rejected;
      KILN_LOG(cache, "entry " << cache_entry_path(dir, kKind, key) << " rejected (" << entry_status_name(status)
                               << "), recompiling");
    }
  }
  const auto compile_start = std::chrono::steady_clock::now();
  CpuKernel compiled = compile();
  const double compile_ms = ms_since(compile_start);
  ++count.compiled;
  if (source) *source = KernelSource::Compiled;
  if (!dir.empty()) {
    const std::string problem = write_cache_entry(dir, kKind, key, CacheEntry{compiled.symbol, compiled.object});
    if (problem.empty()) {
      ++count.disk_writes;
      KILN_LOG(cache, "stored " << cache_entry_path(dir, kKind, key) << " (" << name << ", "
                                << compiled.object.size() << " bytes of object code, compiled in "
                                << compile_ms << " ms)");
    } else {
      ++count.disk_write_failures;
      KILN_LOG(cache, "cannot store " << to_hex(key) << ": " << problem);
    }
  }
  return remember(cache, key, compiled);
}

void clear_kernel_memory_cache() {
  Cache& cache = the_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.memory.clear();
}

KernelCacheCounts kernel_cache_counts() {
  const Counters& count = counters();
  KernelCacheCounts out;
  out.memory_hits = count.memory_hits.load();
  out.disk_hits = count.disk_hits.load();
  out.compiled = count.compiled.load();
  out.disk_rejected = count.disk_rejected.load();
  out.disk_writes = count.disk_writes.load();
  out.disk_write_failures = count.disk_write_failures.load();
  return out;
}

}  // namespace kiln::inductor::cpu
