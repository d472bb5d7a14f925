// The kernel cache's files and directory: one file per compiled kernel,
// verified before anything in it is used, written so that no reader ever
// sees half a file. Nothing here knows about LLVM or the JIT; see Note
// [Kernel cache files] in kernel_cache_file.cpp and kernel_cache.h for the
// cache that uses them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "inductor/cpu/sha256.h"

namespace kiln::inductor::cpu {

// Bumped whenever the file layout or the meaning of an entry changes; part
// of every key and of every file's header.
inline constexpr uint32_t kKernelCacheFormatVersion = 1;

// What one entry holds: a kernel's relocatable object and the name of its
// function in that object.
struct CacheEntry {
  std::string symbol;
  std::string object;
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
  X(WrongKey)                        \
  X(BadLength)                       \
  X(BadChecksum)                     \
  X(BadSymbol)

enum class EntryStatus {
#define KILN_CACHE_ENTRY_ENUM(name) name,
  KILN_CACHE_ENTRY_STATUSES(KILN_CACHE_ENTRY_ENUM)
#undef KILN_CACHE_ENTRY_ENUM
};

// The status's name, e.g. "BadChecksum".
const char* entry_status_name(EntryStatus status);

// The bytes of a file holding `entry` under `key`.
std::string encode_cache_entry(const Sha256Digest& key, const CacheEntry& entry);

// Checks `bytes` (a whole file) against `key` and, when every check passes,
// fills *entry and returns Ok.
EntryStatus decode_cache_entry(std::string_view bytes, const Sha256Digest& key, CacheEntry* entry);

// Where `key`'s entry lives in `dir`.
std::string cache_entry_path(const std::string& dir, const Sha256Digest& key);

// Reads and checks `key`'s entry in `dir`.
EntryStatus read_cache_entry(const std::string& dir, const Sha256Digest& key, CacheEntry* entry);

// Writes `key`'s entry into `dir` atomically: a private temporary file in
// `dir`, fsync'ed, then renamed over the entry's name. Returns "" on
// success, else what failed (the temporary file is removed).
std::string write_cache_entry(const std::string& dir, const Sha256Digest& key, const CacheEntry& entry);

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

}  // namespace kiln::inductor::cpu
