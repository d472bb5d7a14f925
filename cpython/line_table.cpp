// Location table encoding; see Note [Location table format].
#include "cpython/line_table.h"

namespace kiln::cpython {
namespace {

enum Code : int {
  kShortForm0 = 0,
  kOneLine0 = 10,
  kNoColumns = 13,
  kLong = 14,
  kNone = 15,
};

void write_first_byte(std::string& out, int code, int units) {
  out.push_back(static_cast<char>(0x80 | (code << 3) | (units - 1)));
}

void write_varint(std::string& out, unsigned value) {
  while (value >= 64) {
    out.push_back(static_cast<char>(0x40 | (value & 0x3f)));
    value >>= 6;
  }
  out.push_back(static_cast<char>(value));
}

void write_signed_varint(std::string& out, int value) {
  write_varint(out, value < 0 ? (static_cast<unsigned>(-value) << 1) | 1
                              : static_cast<unsigned>(value) << 1);
}

// One entry of at most 8 units; updates *line as CPython's a_lineno.
void write_entry(std::string& out, const SourcePosition& p, int units,
                 int* line) {
  if (p.line < 0) {
    write_first_byte(out, kNone, units);
    return;
  }
  const int delta = p.line - *line;
  const int column = p.column;
  const int end_column = p.end_column;
  if (column < 0 || end_column < 0) {
    if (p.end_line == p.line || p.end_line == -1) {
      write_first_byte(out, kNoColumns, units);
      write_signed_varint(out, delta);
      *line = p.line;
      return;
    }
  } else if (p.end_line == p.line) {
    if (delta == 0 && column < 80 && end_column - column < 16 &&
        end_column >= column) {
      const int column_group = column >> 3;
      const int column_low_bits = column & 7;
      write_first_byte(out, kShortForm0 + column_group, units);
      out.push_back(
          static_cast<char>((column_low_bits << 4) | (end_column - column)));
      return;
    }
    if (delta >= 0 && delta < 3 && column < 128 && end_column < 128) {
      write_first_byte(out, kOneLine0 + delta, units);
      out.push_back(static_cast<char>(column));
      out.push_back(static_cast<char>(end_column));
      *line = p.line;
      return;
    }
  }
  write_first_byte(out, kLong, units);
  write_signed_varint(out, delta);
  const int end_line = p.end_line < p.line ? p.line : p.end_line;
  write_varint(out, static_cast<unsigned>(end_line - p.line));
  write_varint(out, static_cast<unsigned>(column + 1));
  write_varint(out, static_cast<unsigned>(end_column + 1));
  *line = p.line;
}

}  // namespace

std::string encode_location_table(const std::vector<PositionRun>& runs,
                                  int first_line) {
  std::string out;
  int line = first_line;
  // Neighbours with one position share entries (as 3.12's assembler does;
  // 3.11's writes one per instruction, which reads back the same).
  for (size_t i = 0; i < runs.size();) {
    const SourcePosition& position = runs[i].position;
    int units = 0;
    for (; i < runs.size() && runs[i].position == position; ++i) units += runs[i].units;
    while (units > 8) {
      write_entry(out, position, 8, &line);
      units -= 8;
    }
    if (units > 0) write_entry(out, position, units, &line);
  }
  return out;
}

}  // namespace kiln::cpython
