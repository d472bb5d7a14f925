// Exception table encoding; see Note [Exception table format].
#include "cpython/exception_table.h"

namespace kiln::cpython {
namespace {

constexpr uint8_t kContinuation = 0x40;
constexpr uint8_t kEntryStart = 0x80;

void write_item(std::string& out, uint32_t value, uint8_t first_flags) {
  // Groups of six bits, most significant first; 30 bits is CPython's limit.
  int shift = 24;
  while (shift > 0 && (value >> shift) == 0) shift -= 6;
  for (; shift > 0; shift -= 6) {
    out.push_back(static_cast<char>(((value >> shift) & 0x3f) | kContinuation |
                                    first_flags));
    first_flags = 0;
  }
  out.push_back(static_cast<char>((value & 0x3f) | first_flags));
}

bool read_item(const uint8_t* bytes, size_t size, size_t* pos, int* value) {
  uint32_t result = 0;
  for (int groups = 0; groups < 6; ++groups) {
    if (*pos >= size) return false;
    const uint8_t byte = bytes[(*pos)++];
    result = (result << 6) | (byte & 0x3f);
    if ((byte & kContinuation) == 0) {
      *value = static_cast<int>(result);
      return true;
    }
  }
  return false;
}

}  // namespace

std::string encode_exception_table(
    const std::vector<ExceptionTableEntry>& entries) {
  std::string out;
  for (const ExceptionTableEntry& entry : entries) {
    if (entry.end <= entry.start) continue;
    write_item(out, static_cast<uint32_t>(entry.start), kEntryStart);
    write_item(out, static_cast<uint32_t>(entry.end - entry.start), 0);
    write_item(out, static_cast<uint32_t>(entry.target), 0);
    write_item(out,
               (static_cast<uint32_t>(entry.depth) << 1) | (entry.lasti ? 1 : 0),
               0);
  }
  return out;
}

bool decode_exception_table(const uint8_t* bytes, size_t size,
                            std::vector<ExceptionTableEntry>* entries) {
  entries->clear();
  size_t pos = 0;
  while (pos < size) {
    if ((bytes[pos] & kEntryStart) == 0) return false;
    int start = 0, length = 0, target = 0, depth_lasti = 0;
    if (!read_item(bytes, size, &pos, &start) ||
        !read_item(bytes, size, &pos, &length) ||
        !read_item(bytes, size, &pos, &target) ||
        !read_item(bytes, size, &pos, &depth_lasti))
      return false;
    entries->push_back({start, start + length, target, depth_lasti >> 1,
                        (depth_lasti & 1) != 0});
  }
  return true;
}

}  // namespace kiln::cpython
