// The CUDA cubin cache on disk: NVRTC's output kept across processes, keyed
// by a SHA-256 of everything that decides the cubin (Note [Cubin cache
// keys] in cubin_cache.cpp), in the CPU kernel cache's files and directory
// (inductor/kernel_cache_file.h: checksummed, atomically written, never a
// torn, damaged or foreign file loaded). The memory cache of loaded kernels
// is cuda_kernel.h's compile_cuda_cached, which calls this on a miss. No
// CUDA header here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inductor/sha256.h"

namespace kiln::inductor::cuda {

// The key of the cubin NVRTC `nvrtc_version` makes of `source` for `arch`
// with `options` (the parts are passed in so tests can ask for another
// NVRTC's key).
Sha256Digest cubin_cache_key(std::string_view source, const std::string& arch, const std::string& nvrtc_version,
                             const std::vector<std::string>& options);

// The key this process files `source` for `arch` under: the loaded NVRTC's
// version and nvrtc_options(arch). Throws CudaError without NVRTC.
Sha256Digest cubin_cache_key(std::string_view source, const std::string& arch);

// Where cached_cubin found a cubin.
enum class CubinOrigin { Disk, Compiled };

// The cubin of `source` for `arch`: read from the disk cache
// (kernel_cache_dir()) when a valid entry holds it, else compiled by NVRTC
// and stored. `entry_name` is a symbol the source defines (its scalar
// entry): stored as the entry's name and checked on a hit. A damaged,
// truncated or foreign entry is logged (KILN_LOGS=cache), counted, never
// returned, and replaced by a fresh compile; so is an entry holding the
// source's cubin compiled among other kernels (its entry renamed), for a
// caller that looks the entry up by its own name. Thread-safe. Throws CudaError
// when NVRTC is missing or fails.
std::string cached_cubin(const std::string& source, const std::string& entry_name, const std::string& arch,
                         CubinOrigin* origin = nullptr);

// A cubin as the disk cache files it: its bytes and the name of the
// source's scalar entry in them (renamed when the source was compiled
// among others: Note [Kernels compiled together] in cuda_program.cpp).
struct StoredCubin {
  std::string cubin;
  std::string entry_name;
};

// `source`'s cubin for `arch` from the disk cache into `out`: true when a
// valid entry holds one whose entry is `entry_name` or a program name of it
// (is_program_entry_of). A damaged or foreign entry is logged and counted
// as cached_cubin says, and reads as a miss. Thread-safe.
bool read_cached_cubin(const std::string& source, const std::string& entry_name, const std::string& arch,
                       StoredCubin* out);

// Files `stored` under `source`'s key for `arch` (nothing without a cache
// directory); a failed write is logged and counted. Thread-safe.
void store_cubin(const std::string& source, const std::string& arch, const StoredCubin& stored, double compile_ms);

// Counts one NVRTC program that compiled `kernels` kernels (cached_cubin
// counts its own).
void count_compiled(int64_t kernels);

// Counters of the cubin cache since the process started.
struct CubinCacheCounts {
  int64_t disk_hits = 0;
  int64_t compiled = 0;       // kernels NVRTC compiled
  int64_t programs = 0;       // NVRTC runs (a program may hold several kernels)
  int64_t disk_rejected = 0;  // entries found damaged or foreign, then recompiled
  int64_t disk_writes = 0;
  int64_t disk_write_failures = 0;
};

// A snapshot of the counters.
CubinCacheCounts cubin_cache_counts();

}  // namespace kiln::inductor::cuda
