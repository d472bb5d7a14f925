// Decodes a CPython code object's bytecode into kiln's normalized instruction
// stream (instruction.h) using the running version's opcode table.
// See Note [Decoding bytecode].
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cpython/instruction.h"
#include "cpython/opcode_table.h"

namespace kiln::cpython {

// Note [Decoding bytecode]
// The decoder reads PyCode_GetCode's bytecode, which CPython has stripped of
// adaptive specializations and instrumentation, so only the opcodes dis names
// appear. One Instruction comes out per real opcode: EXTENDED_ARG prefixes
// are folded into the opcode they extend (raw_arg carries the full value,
// offset is the opcode's own offset, and a jump to a prefix lands on the
// instruction it extends) and CACHE code units are skipped using the table's
// cache counts. Jump targets are instruction indices equal to dis's argval:
// 3.12 FOR_ITER's target is therefore its END_FOR, although CPython's
// exhausted FOR_ITER resumes just after it (see ForIter in instruction.h).
// Decoding never fails: an unknown opcode becomes Unsupported, named
// "<opcode N>", and a jump outside the code keeps target -1.
// Every function here must be called with the GIL held.

// Decodes code for the running CPython; returns an empty stream only if
// CPython cannot produce the bytecode (out of memory; the error is cleared).
std::vector<Instruction> decode_bytecode(PyCodeObject* code);

// Decodes raw co_code bytes with a given version's table, leaving line at -1;
// lets tests decode bytecode of a version other than the running one.
std::vector<Instruction> decode_code_units(const OpcodeTable& table,
                                           const uint8_t* bytes, size_t size);

// Lists code's decoded instructions as stable text for golden files; see
// the definition for the line format.
std::string format_bytecode(PyCodeObject* code);

// Whether code has try/with/... blocks, i.e. a non-empty co_exceptiontable.
bool has_exception_table(PyCodeObject* code);

}  // namespace kiln::cpython
