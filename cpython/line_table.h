// CPython 3.11+/3.12 location tables (co_linetable, PEP 626 positions in the
// 3.11 format): encoding. See Note [Location table format].
#pragma once

#include <string>
#include <vector>

namespace kiln::cpython {

// Note [Location table format]
// co_linetable holds one entry per run of at most 8 code units sharing a
// source position. An entry's first byte is 0x80 | code << 3 | (units - 1);
// code 15 means "no position", 13 "line only" (a signed varint line delta),
// 10..12 "one line" (delta code-10, then start and end column bytes), 14 the
// long form (signed line delta, end-line delta, column + 1, end column + 1
// as varints) and 0..9 the short form (same line, column < 80, width < 16).
// Line deltas are relative to the previous entry that had a line, starting
// from co_firstlineno. Varints are 6-bit groups, least significant first,
// bit 0x40 on all but the last; a signed varint stores |v| << 1 | sign.
// The encoder mirrors CPython 3.12's assemble_location_info (neighbouring
// instructions with equal positions share entries) and
// write_location_info_entry, so code whose positions are copied from a
// CPython-compiled function gets 3.12's bytes; 3.11 writes an entry per
// instruction, which decodes to the same positions.

// A source position; -1 fields are unknown (line -1: no position at all).
struct SourcePosition {
  int line = -1;
  int end_line = -1;
  int column = -1;
  int end_column = -1;

  bool operator==(const SourcePosition&) const = default;
};

// One instruction's position and its size in code units (EXTENDED_ARG
// prefixes and CACHE entries included).
struct PositionRun {
  SourcePosition position;
  int units = 1;
};

// Encodes runs, in code order, as the bytes of co_linetable.
std::string encode_location_table(const std::vector<PositionRun>& runs,
                                  int first_line);

}  // namespace kiln::cpython
