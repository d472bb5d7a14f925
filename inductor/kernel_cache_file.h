// The kernel caches' files and directory, shared by the CPU cache
// (inductor/cpu/kernel_cache.h: relocatable objects) and the CUDA cache
// (inductor/cuda/cubin_cache.h: cubins): one file per compiled kernel,
// verified before anything in it is used, written so that no reader ever
// sees half a file, in one private directory per user. Nothing here knows
// about LLVM, NVRTC or what a payload means; see Note [Kernel cache files]
// in kernel_cache_file.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "inductor/sha256.h"

namespace kiln::inductor {

// Bumped whenever the file layout or the meaning of an entry changes; part
// of every file's header and of every key (CPU and CUDA), so entries of an
// older layout are never even looked up.
inline constexpr uint32_t kKernelCacheFormatVersion = 2;

// What an entry's payload is. Recorded in the header and checked on read;
// also decides the file's extension.
enum class CacheEntryKind : uint32_t {
  CpuObject = 1,  // an ELF relocatable object for the host CPU; name = its function's symbol
  CudaCubin = 2,  // a cubin from NVRTC; name = its scalar entry's symbol
};

// What one entry holds: a name (a symbol the payload defines, [A-Za-z0-9_.],
// 1..256 characters) and the payload bytes.
struct CacheEntry {
  std::string name;
  std::string payload;
};

// What reading an entry found. Everything but Ok and Missing means the file
// is damaged or not the entry asked for: it is never loaded.
#define KILN_CACHE_ENTRY_STATUSES(X) \
  X(Ok)                              \
  X(Missing)                         \
  X(Unreadable)                      \
  X(NotAFile)                        \
  X(Truncated)                       \
  X(BadMagic)                        \
  X(BadVersion)                      \
  X(WrongKind)                       \
  X(WrongKey)                        \
  X(BadLength)                       \
  X(BadChecksum)                     \
  X(BadName)

enum class EntryStatus {
#define KILN_CACHE_ENTRY_ENUM(name) name,
  KILN_CACHE_ENTRY_STATUSES(KILN_CACHE_ENTRY_ENUM)
#undef KILN_CACHE_ENTRY_ENUM
};

// The status's name, e.g. "BadChecksum".
const char* entry_status_name(EntryStatus status);

// The bytes of a file holding `entry` of `kind` under `key`.
std::string encode_cache_entry(CacheEntryKind kind, const Sha256Digest& key, const CacheEntry& entry);

// Checks `bytes` (a whole file) against `kind` and `key` and, when every
// check passes, fills *entry and returns Ok.
EntryStatus decode_cache_entry(std::string_view bytes, CacheEntryKind kind, const Sha256Digest& key,
                               CacheEntry* entry);

// Where `key`'s entry of `kind` lives in `dir` (<hex key>.kernel or .cubin).
std::string cache_entry_path(const std::string& dir, CacheEntryKind kind, const Sha256Digest& key);

// Reads and checks `key`'s entry of `kind` in `dir`.
EntryStatus read_cache_entry(const std::string& dir, CacheEntryKind kind, const Sha256Digest& key,
                             CacheEntry* entry);

// Writes `key`'s entry of `kind` into `dir` atomically: a private temporary
// file in `dir`, fsync'ed, then renamed over the entry's name. Returns "" on
// success, else what failed (the temporary file is removed).
std::string write_cache_entry(const std::string& dir, CacheEntryKind kind, const Sha256Digest& key,
                              const CacheEntry& entry);

// The directory the environment names: $KILN_CACHE_DIR when set (set but
// empty: "", the disk cache is off), else $XDG_CACHE_HOME/kiln when that is
// an absolute path, else $HOME/.cache/kiln (the passwd entry's home when
// HOME is unset).
std::string cache_dir_from_environment();

// Makes `dir` usable as a cache directory: creates it (and missing parents)
// with mode 0700 when absent, then checks that it is a directory owned by
// this user and writable by no one else. Returns "" when it may be used,
// else why not.
std::string prepare_cache_dir(const std::string& dir);

// The disk caches' directory (CPU and CUDA share it), "" when the disk cache
// is off. Resolved and prepared on first use from the environment
// (cache_dir_from_environment, prepare_cache_dir) unless
// set_kernel_cache_dir chose one. Thread-safe.
std::string kernel_cache_dir();

// Uses `dir` for the disk caches from now on ("" turns them off). Returns ""
// when the directory is in use (or the cache is off), else why it was
// refused (prepare_cache_dir); a refused directory leaves the caches in
// memory only. Thread-safe.
std::string set_kernel_cache_dir(const std::string& dir);

}  // namespace kiln::inductor
