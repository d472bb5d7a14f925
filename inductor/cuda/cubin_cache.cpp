#include "inductor/cuda/cubin_cache.h"

#include <atomic>
#include <chrono>

#include "inductor/cuda/cuda_program.h"
#include "inductor/cuda/nvrtc_compiler.h"
#include "inductor/kernel_cache_file.h"
#include "base/log.h"

namespace kiln::inductor::cuda {

// Note [Cubin cache keys]
// A key is the SHA-256 of, each as a length-prefixed field: a domain tag
// (so no CPU key can equal it), the cache format version, the target
// architecture ("sm_90a"), NVRTC's version (nvrtcVersion: "13.0"), every
// NVRTC option, and last the CUDA source text. Nothing else decides the
// cubin: the source is the whole translation unit (no #include, Note [CUDA
// kernels]), and its entry names and launch shapes are in it. So, unlike
// the CPU key, kiln's build identity is not hashed: a kiln rebuild that
// writes the same source reuses the cubin, and one that changes the source
// changes the key. A cubin of another architecture or NVRTC version lives
// under another key and is never looked up; a file copied under this key's
// name is refused by the file's own key check. nvrtcVersion gives no patch
// level: two NVRTC patch releases of one minor version share entries (both
// produce valid cubins for the architecture; only the instruction schedule
// may differ). The driver is not hashed: a cubin for an architecture loads
// on any driver of a CUDA version at least NVRTC's, and with an older
// driver a fresh compile would not load either.

namespace {

constexpr CacheEntryKind kKind = CacheEntryKind::CudaCubin;

struct Counters {
  std::atomic<int64_t> disk_hits{0};
  std::atomic<int64_t> compiled{0};
  std::atomic<int64_t> programs{0};
  std::atomic<int64_t> disk_rejected{0};
  std::atomic<int64_t> disk_writes{0};
  std::atomic<int64_t> disk_write_failures{0};
};

Counters& counters() {
  static Counters* made = new Counters();
  return *made;
}

// Milliseconds since `start`, for the cache's log lines.
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The loaded NVRTC's version, asked once.
const std::string& loaded_nvrtc_version() {
  static const std::string version = nvrtc_version();
  return version;
}

}  // namespace

Sha256Digest cubin_cache_key(std::string_view source, const std::string& arch, const std::string& nvrtc_version,
                             const std::vector<std::string>& options) {
  Sha256 hash;
  hash.update_field("kiln cuda cubin");
  hash.update_u64(kKernelCacheFormatVersion);
  hash.update_field(arch);
  hash.update_field(nvrtc_version);
  hash.update_u64(options.size());
  for (const std::string& option : options) hash.update_field(option);
  hash.update_field(source);
  return hash.digest();
}

Sha256Digest cubin_cache_key(std::string_view source, const std::string& arch) {
  return cubin_cache_key(source, arch, loaded_nvrtc_version(), nvrtc_options(arch));
}

namespace {

// read_cached_cubin; with `program_names` false only an entry stored under
// `entry_name` itself is a hit, and one of a program (renamed) a miss.
bool read_entry(const std::string& source, const std::string& entry_name, const std::string& arch, StoredCubin* out,
                bool program_names) {
  Counters& count = counters();
  const std::string dir = kernel_cache_dir();
  if (dir.empty()) return false;
  const Sha256Digest key = cubin_cache_key(source, arch);
  const auto start = std::chrono::steady_clock::now();
  CacheEntry entry;
  const EntryStatus status = read_cache_entry(dir, kKind, key, &entry);
  if (status == EntryStatus::Ok && !program_names && entry.name != entry_name &&
      is_program_entry_of(entry.name, entry_name)) {
    KILN_LOG(cache, "entry " << to_hex(key) << " holds " << entry_name << " compiled among other kernels (as "
                             << entry.name << "); compiling it alone");
    return false;
  }
  if (status == EntryStatus::Ok && is_program_entry_of(entry.name, entry_name)) {
    ++count.disk_hits;
    KILN_LOG(cache, "disk hit " << to_hex(key) << " (cubin of " << entry.name << " for " << arch << "), read in "
                                << ms_since(start) << " ms");
    out->cubin = std::move(entry.payload);
    out->entry_name = std::move(entry.name);
    return true;
  }
  if (status == EntryStatus::Ok) {
    // The key covers the source, which defines the name: only a forged
    // file gets here.
    ++count.disk_rejected;
    KILN_LOG(cache, "entry " << cache_entry_path(dir, kKind, key) << " rejected (holds " << entry.name << ", not "
                             << entry_name << "), recompiling");
  } else if (status != EntryStatus::Missing) {
    ++count.disk_rejected;
    KILN_LOG(cache, "entry " << cache_entry_path(dir, kKind, key) << " rejected (" << entry_status_name(status)
                             << "), recompiling");
  }
  return false;
}

}  // namespace

bool read_cached_cubin(const std::string& source, const std::string& entry_name, const std::string& arch,
                       StoredCubin* out) {
  return read_entry(source, entry_name, arch, out, true);
}

void store_cubin(const std::string& source, const std::string& arch, const StoredCubin& stored, double compile_ms) {
  Counters& count = counters();
  const std::string dir = kernel_cache_dir();
  if (dir.empty()) return;
  const Sha256Digest key = cubin_cache_key(source, arch);
  const std::string problem = write_cache_entry(dir, kKind, key, CacheEntry{stored.entry_name, stored.cubin});
  if (problem.empty()) {
    ++count.disk_writes;
    KILN_LOG(cache, "stored " << cache_entry_path(dir, kKind, key) << " (cubin of " << stored.entry_name << " for "
                              << arch << ", " << stored.cubin.size() << " bytes, compiled in " << compile_ms
                              << " ms)");
  } else {
    ++count.disk_write_failures;
    KILN_LOG(cache, "cannot store " << to_hex(key) << ": " << problem);
  }
}

void count_compiled(int64_t kernels) {
  counters().compiled += kernels;
  ++counters().programs;
}

std::string cached_cubin(const std::string& source, const std::string& entry_name, const std::string& arch,
                         CubinOrigin* origin) {
  StoredCubin stored;
  if (read_entry(source, entry_name, arch, &stored, false)) {
    if (origin) *origin = CubinOrigin::Disk;
    return std::move(stored.cubin);
  }
  const auto compile_start = std::chrono::steady_clock::now();
  stored.cubin = compile_cubin(source, arch);
  stored.entry_name = entry_name;
  count_compiled(1);
  if (origin) *origin = CubinOrigin::Compiled;
  store_cubin(source, arch, stored, ms_since(compile_start));
  return std::move(stored.cubin);
}

CubinCacheCounts cubin_cache_counts() {
  const Counters& count = counters();
  CubinCacheCounts out;
  out.disk_hits = count.disk_hits.load();
  out.compiled = count.compiled.load();
  out.programs = count.programs.load();
  out.disk_rejected = count.disk_rejected.load();
  out.disk_writes = count.disk_writes.load();
  out.disk_write_failures = count.disk_write_failures.load();
  return out;
}

}  // namespace kiln::inductor::cuda
