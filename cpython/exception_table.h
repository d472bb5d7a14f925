// CPython 3.11+/3.12 exception tables (co_exceptiontable): encoding and
// decoding. The format is the same on every version kiln supports; see
// Note [Exception table format].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cpython {

// Note [Exception table format]
// co_exceptiontable is a sequence of entries sorted by start, none
// overlapping. An entry is four varints: start, length, target (all in code
// units of co_code) and depth << 1 | lasti. A varint is 6-bit groups, most
// significant first, bit 0x40 set on every group but the last; the first
// byte of an entry also has bit 0x80 set (CPython's
// assemble_emit_exception_table_entry; InternalDocs/exception_handling.md).
// When an instruction in [start, start + length) raises, CPython pops the
// value stack down to `depth` items, pushes the offset of the raising
// instruction if lasti, pushes the exception and jumps to target.

// One entry, in code units.
struct ExceptionTableEntry {
  int start = 0;   // first code unit covered
  int end = 0;     // one past the last code unit covered
  int target = 0;  // code unit of the handler
  int depth = 0;   // stack depth the handler starts from (before lasti/exc)
  bool lasti = false;

  bool operator==(const ExceptionTableEntry&) const = default;
};

// Encodes entries (sorted, non-overlapping; empty ranges are skipped) as the
// bytes of co_exceptiontable.
std::string encode_exception_table(const std::vector<ExceptionTableEntry>& entries);

// Decodes co_exceptiontable bytes; false if they are malformed.
bool decode_exception_table(const uint8_t* bytes, size_t size,
                            std::vector<ExceptionTableEntry>* entries);

}  // namespace kiln::cpython
