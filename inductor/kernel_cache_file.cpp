#include "inductor/kernel_cache_file.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"

namespace kiln::inductor {

// Note [Kernel cache files]
// One file per entry, named <64 hex digits of the key> plus ".kernel" (a
// CPU object) or ".cubin" (a CUDA cubin), laid out as (integers
// little-endian):
//
//   offset  size  field
//        0     8  magic "KILNKERN"
//        8     4  format version (kKernelCacheFormatVersion)
//       12     4  kind (CacheEntryKind: 1 CPU object, 2 CUDA cubin)
//       16    32  key (the SHA-256 the entry is filed under)
//       48     4  name length S (1..256)
//       52     8  payload length N
//       60    32  checksum: SHA-256 of bytes [0, 60) and [92, 92 + S + N)
//       92     S  name ([A-Za-z0-9_.]: the symbol the loader looks up)
//   92 + S     N  payload (object or cubin)
//
// A reader trusts nothing: the file must be a regular file of exactly
// 92 + S + N bytes, with the magic, this build's format version, the kind
// the cache asked for, the key it was looked up by (a file copied or renamed
// to another key's name is refused: an entry of another architecture, NVRTC
// or LLVM version has another key), and a checksum that covers every other
// byte, so truncation, a flipped bit or a torn write is caught before the
// JIT or the CUDA driver sees the payload. What a payload means is the
// caller's business (kernel_cache.cpp, cubin_cache.cpp); the format and its
// checks are one code for both. A
// writer never writes in place: it writes a temporary file in the same
// directory (O_EXCL, mode 0600, named after the entry, the pid and 64 random
// bits), fsyncs it and rename()s it over the entry, which POSIX makes
// atomic, so concurrent writers of one entry leave one whole file and a
// concurrent reader sees the old file or the new one, never a mix.

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'E', 'R', 'N'};
constexpr size_t kHeaderSize = 92;
constexpr size_t kChecksummedHeader = 60;  // bytes before the checksum field
constexpr size_t kMaxName = 256;
constexpr uint64_t kMaxPayload = uint64_t{1} << 30;  // a kernel's object or cubin is kilobytes

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(value >> (8 * i));
}

void put_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(value >> (8 * i));
}

uint64_t get_le(std::string_view bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) value |= uint64_t{static_cast<uint8_t>(bytes[at + i])} << (8 * i);
  return value;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxName) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Sha256Digest checksum(std::string_view header, std::string_view payload) {
  Sha256 hash;
  hash.update(header.substr(0, kChecksummedHeader));
  hash.update(payload);
  return hash.digest();
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t wrote = ::write(fd, bytes.data(), bytes.size());
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(wrote));
  }
  return true;
}

// Unique among this process's writers (the pid in the name separates
// processes): a counter, with the clock so a reused pid does not meet a
// temp file a crashed writer left behind. No std::random_device: it
// crashed on the GPU host's toolchain.
std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  const uint64_t now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t serial = counter.fetch_add(1, std::memory_order_relaxed);
  uint64_t bits = now * 0x9E3779B97F4A7C15ull;
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i, bits >>= 4) out += kDigits[bits & 15];
  return out + "." + std::to_string(serial);
}

std::string home_dir() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found && found->pw_dir) {
    return found->pw_dir;
  }
  return "";
}

// mkdir -p with mode 0700 for every directory it creates.
std::string make_dirs(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return errno_text("cannot create " + prefix);
    }
    if (slash == std::string::npos) return "";
  }
}

}  // namespace

const char* entry_status_name(EntryStatus status) {
  switch (status) {
#define KILN_CACHE_ENTRY_NAME(name) \
  case EntryStatus::name:           \
    return #name;
    KILN_CACHE_ENTRY_STATUSES(KILN_CACHE_ENTRY_NAME)
#undef KILN_CACHE_ENTRY_NAME
  }
  return "?";
}

std::string encode_cache_entry(CacheEntryKind kind, const Sha256Digest& key, const CacheEntry& entry) {
  std::string out(kMagic, sizeof(kMagic));
  put_u32(out, kKernelCacheFormatVersion);
  put_u32(out, static_cast<uint32_t>(kind));
  out.append(reinterpret_cast<const char*>(key.data()), key.size());
  put_u32(out, static_cast<uint32_t>(entry.name.size()));
  put_u64(out, entry.payload.size());
  const std::string body = entry.name + entry.payload;
  const Sha256Digest sum = checksum(out, body);
  out.append(reinterpret_cast<const char*>(sum.data()), sum.size());
  out += body;
  return out;
}

EntryStatus decode_cache_entry(std::string_view bytes, CacheEntryKind kind, const Sha256Digest& key,
                               CacheEntry* entry) {
  if (bytes.size() < kHeaderSize) return EntryStatus::Truncated;
  if (bytes.substr(0, sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) return EntryStatus::BadMagic;
  if (get_le(bytes, 8, 4) != kKernelCacheFormatVersion) return EntryStatus::BadVersion;
  if (get_le(bytes, 12, 4) != static_cast<uint32_t>(kind)) return EntryStatus::WrongKind;
  if (bytes.substr(16, 32) != std::string_view(reinterpret_cast<const char*>(key.data()), key.size())) {
    return EntryStatus::WrongKey;
  }
  const uint64_t name_size = get_le(bytes, 48, 4);
  const uint64_t payload_size = get_le(bytes, 52, 8);
  if (name_size == 0 || name_size > kMaxName || payload_size > kMaxPayload) return EntryStatus::BadLength;
  const uint64_t expected = kHeaderSize + name_size + payload_size;
  if (bytes.size() < expected) return EntryStatus::Truncated;
  if (bytes.size() > expected) return EntryStatus::BadLength;
  const std::string_view body = bytes.substr(kHeaderSize);
  const Sha256Digest sum = checksum(bytes, body);
  if (bytes.substr(kChecksummedHeader, 32) != std::string_view(reinterpret_cast<const char*>(sum.data()), sum.size())) {
    return EntryStatus::BadChecksum;
  }
  const std::string_view name = body.substr(0, name_size);
  if (!valid_name(name)) return EntryStatus::BadName;
  entry->name = std::string(name);
  entry->payload = std::string(body.substr(name_size));
  return EntryStatus::Ok;
}

std::string cache_entry_path(const std::string& dir, CacheEntryKind kind, const Sha256Digest& key) {
  return dir + "/" + to_hex(key) + (kind == CacheEntryKind::CudaCubin ? ".cubin" : ".kernel");
}

EntryStatus read_cache_entry(const std::string& dir, CacheEntryKind kind, const Sha256Digest& key,
                             CacheEntry* entry) {
  const std::string path = cache_entry_path(dir, kind, key);
  // O_NOFOLLOW: an entry is a file this user wrote, never a link elsewhere.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno == ENOENT ? EntryStatus::Missing : EntryStatus::Unreadable;
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return EntryStatus::NotAFile;
  }
  if (static_cast<uint64_t>(info.st_size) > kHeaderSize + kMaxName + kMaxPayload) {
    ::close(fd);
    return EntryStatus::BadLength;
  }
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t read = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (read < 0 && errno == EINTR) continue;
    if (read <= 0) break;
    got += static_cast<size_t>(read);
  }
  ::close(fd);
  bytes.resize(got);
  return decode_cache_entry(bytes, kind, key, entry);
}

std::string write_cache_entry(const std::string& dir, CacheEntryKind kind, const Sha256Digest& key,
                              const CacheEntry& entry) {
  if (!valid_name(entry.name)) return "invalid name '" + entry.name + "'";
  const std::string bytes = encode_cache_entry(kind, key, entry);
  const std::string path = cache_entry_path(dir, kind, key);
  const std::string temporary = path + ".tmp." + std::to_string(::getpid()) + "." + random_suffix();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errno_text("cannot create " + temporary);
  std::string problem;
  if (!write_all(fd, bytes)) {
    problem = errno_text("cannot write " + temporary);
  } else if (::fsync(fd) != 0) {
    problem = errno_text("cannot fsync " + temporary);
  }
  if (::close(fd) != 0 && problem.empty()) problem = errno_text("cannot close " + temporary);
  if (problem.empty() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    problem = errno_text("cannot rename " + temporary + " to " + path);
  }
  if (!problem.empty()) ::unlink(temporary.c_str());
  return problem;
}

std::string cache_dir_from_environment() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR")) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/') {
    return std::string(xdg) + "/kiln";
  }
  const std::string home = home_dir();
  if (home.empty()) return "";
  return home + "/.cache/kiln";
}

std::string prepare_cache_dir(const std::string& dir) {
  if (dir.empty()) return "no directory";
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    if (errno != ENOENT) return errno_text("cannot stat " + dir);
    if (std::string problem = make_dirs(dir); !problem.empty()) return problem;
    if (::stat(dir.c_str(), &info) != 0) return errno_text("cannot stat " + dir);
  }
  if (!S_ISDIR(info.st_mode)) return dir + " is not a directory";
  if (info.st_uid != ::geteuid()) {
    return dir + " is owned by uid " + std::to_string(info.st_uid) + ", not by this user (uid " +
           std::to_string(::geteuid()) + ")";
  }
  if (info.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return dir + " is writable by other users (mode " + mode + ")";
  }
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) return errno_text("cannot use " + dir);
  return "";
}

namespace {

// The process's choice of directory, one for every kind of entry; leaked so
// that kernels compiled during static destruction still find it.
struct CacheDir {
  std::mutex mutex;
  bool resolved = false;
  std::string dir;  // "" when the disk cache is off
};

CacheDir& the_dir() {
  static CacheDir* made = new CacheDir();
  return *made;
}

// Decides the directory under its lock.
std::string use_dir_locked(CacheDir& state, const std::string& dir) {
  state.resolved = true;
  state.dir.clear();
  if (dir.empty()) {
    KILN_LOG(cache, "disk cache off (KILN_CACHE_DIR is set but empty, or there is no home directory)");
    return "";
  }
  std::string problem = prepare_cache_dir(dir);
  if (!problem.empty()) {
    KILN_LOG(cache, "disk cache off: " << problem);
    return problem;
  }
  // Absolute, so that a later chdir does not move the cache.
  char* resolved = ::realpath(dir.c_str(), nullptr);
  state.dir = resolved ? resolved : dir;
  std::free(resolved);
  KILN_LOG(cache, "disk cache in " << state.dir);
  return "";
}

}  // namespace

std::string kernel_cache_dir() {
  CacheDir& state = the_dir();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.resolved) use_dir_locked(state, cache_dir_from_environment());
  return state.dir;
}

std::string set_kernel_cache_dir(const std::string& dir) {
  CacheDir& state = the_dir();
  std::lock_guard<std::mutex> lock(state.mutex);
  return use_dir_locked(state, dir);
}

}  // namespace kiln::inductor
