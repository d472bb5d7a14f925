// Per-version CPython opcode tables: for every opcode number, CPython's name,
// its inline cache size and how kiln normalizes it. See Note [Opcode tables].
#pragma once

#include <array>
#include <cstdint>

#include "cpython/instruction.h"

namespace kiln::cpython {

// Note [Opcode tables]
// Each supported CPython minor version gets one OpcodeTable covering all 256
// opcode numbers, written as data in opcode_table_3NN.cpp and checked by the
// tests against CPython's own dis module: every version against a checked-in
// dump (tests/cpp/cpython/opcodes_3NN.txt), the embedded one also against
// the live module. Numbers that dis does not name (adaptive specializations,
// unused slots) keep the default entry: no name, Op::Unsupported.
// Specialized and instrumented opcodes never reach the decoder because it
// reads PyCode_GetCode's deoptimized bytecode; they are Unsupported so that a
// stray one cannot be mistaken for something kiln models.

// What an opcode's oparg refers to; it drives jump decoding and the argument
// text of format_bytecode. Const/Name/Local/Free/Compare/Jump* mirror dis's
// hasconst/hasname/haslocal/hasfree/hascompare/hasjrel lists.
enum class Operand : uint8_t {
  None,          // a plain number, or nothing below have_argument
  Const,         // co_consts index
  Name,          // co_names index
  Local,         // localsplus index of a fast local
  Free,          // localsplus index of a cell or free variable
  Compare,       // comparison operator
  JumpForward,   // code units forward from the end of the instruction's caches
  JumpBackward,  // code units backward from the end of the instruction's caches
  BinaryOp,      // NB_* code
  FormatValue,   // FORMAT_VALUE conversion flags
  MakeFunction,  // MAKE_FUNCTION flags
  Intrinsic1,    // CALL_INTRINSIC_1 function number
  Intrinsic2,    // CALL_INTRINSIC_2 function number
};

// How Instruction::arg and flags are derived from the raw oparg.
enum class ArgKind : uint8_t {
  Raw,           // arg = oparg
  GlobalIndex,   // arg = oparg >> 1; low bit sets kPushNull (LOAD_GLOBAL)
  AttrIndex,     // arg = oparg >> 1; low bit sets kMethod (3.12 LOAD_ATTR)
  SuperAttrIndex,  // arg = oparg >> 2; low bit sets kMethod (LOAD_SUPER_ATTR)
  CompareShift4,   // arg = oparg >> 4 (3.12 COMPARE_OP keeps a mask below)
  Intrinsic1Op,    // the op comes from OpcodeTable::intrinsic1[oparg]
};

// One opcode number of one CPython version.
struct OpcodeInfo {
  const char* name = nullptr;  // dis.opname; nullptr where dis names nothing
  Op op = Op::Unsupported;
  uint8_t cache_entries = 0;   // CACHE code units that follow the opcode
  Operand operand = Operand::None;
  ArgKind arg = ArgKind::Raw;
  uint8_t flags = 0;  // Instruction::flags always set, e.g. kMethod
};

// One CALL_INTRINSIC_1/2 function number.
struct IntrinsicInfo {
  const char* name = nullptr;
  Op op = Op::Unsupported;
};

// All opcodes of one CPython minor version.
struct OpcodeTable {
  int minor = 0;
  uint8_t have_argument = 0;   // opcodes below it ignore their oparg
  uint8_t extended_arg = 0;    // EXTENDED_ARG's number
  uint8_t cache = 0;           // CACHE's number
  std::array<OpcodeInfo, 256> ops{};
  std::array<IntrinsicInfo, 16> intrinsic1{};
  std::array<IntrinsicInfo, 16> intrinsic2{};
};

// One row of a table definition: OpcodeInfo plus the number it belongs to.
struct OpcodeEntry {
  uint8_t number;
  const char* name;
  Op op;
  uint8_t cache_entries = 0;
  Operand operand = Operand::None;
  ArgKind arg = ArgKind::Raw;
  uint8_t flags = 0;
};

// Builds a table from rows keyed by opcode number; constexpr so that a
// repeated number is a compile error (throw is not a constant expression)
// rather than a silently overwritten row.
template <size_t N>
constexpr OpcodeTable build_opcode_table(int minor, uint8_t have_argument,
                                         uint8_t extended_arg, uint8_t cache,
                                         const OpcodeEntry (&rows)[N]) {
  OpcodeTable table;
  table.minor = minor;
  table.have_argument = have_argument;
  table.extended_arg = extended_arg;
  table.cache = cache;
  for (const OpcodeEntry& row : rows) {
    OpcodeInfo& info = table.ops[row.number];
    if (info.name != nullptr) throw "opcode number listed twice";
    info = OpcodeInfo{row.name,    row.op,  row.cache_entries,
                      row.operand, row.arg, row.flags};
  }
  return table;
}

// CPython 3.11's opcodes.
const OpcodeTable& opcode_table_311();

// CPython 3.12's opcodes.
const OpcodeTable& opcode_table_312();

// The table of CPython 3.<python_minor>; throws std::invalid_argument for a
// version kiln does not support. Defined in bytecode_decoder.cpp.
const OpcodeTable& opcode_table(int python_minor);

// The table of the CPython kiln was built against (and therefore runs in).
// Defined in bytecode_decoder.cpp.
const OpcodeTable& running_opcode_table();

}  // namespace kiln::cpython
