// SHA-256 (FIPS 180-4), written for kiln: the kernel caches (CPU objects and
// CUDA cubins) name their entries by a SHA-256 of what decides the machine
// code, and check each file's payload by one. No LLVM or system crypto
// library is needed, so builds without LLVM have it too.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::inductor {

// A SHA-256 digest.
using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();

  // Appends `bytes` to the message.
  void update(std::string_view bytes);

  // Appends an integer as 8 little-endian bytes, so that fields hashed one
  // after another cannot run into each other.
  void update_u64(uint64_t value);

  // Appends the length, then the bytes: an unambiguous field.
  void update_field(std::string_view bytes);

  // Finishes the message and returns its digest; the object is spent.
  Sha256Digest digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes so far
};

// The digest of `bytes`.
Sha256Digest sha256(std::string_view bytes);

// The digest as 64 lowercase hex digits.
std::string to_hex(const Sha256Digest& digest);

}  // namespace kiln::inductor
