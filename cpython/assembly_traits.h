// What the bytecode assembler needs to know about one CPython version,
// derived from that version's OpcodeTable (opcode_table.h) so that no
// version number is tested anywhere. See Note [Assembly traits].
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "cpython/opcode_table.h"

namespace kiln::cpython {

// Note [Assembly traits]
// The assembler (bytecode_builder.h) writes bytecode for the opcode table it
// was given. Everything that differs between 3.11 and 3.12 is read off the
// table as data, never from a version number:
//   - an opcode that exists on one version only is -1 on the other
//     (PRECALL, LOAD_METHOD, the POP_JUMP_BACKWARD_IF_* family,
//     JUMP_IF_{FALSE,TRUE}_OR_POP: 3.11; RETURN_CONST, END_FOR,
//     LOAD_FAST_CHECK: 3.12);
//   - argument encodings come from the ArgKind of the opcode's row
//     (LOAD_ATTR's method bit, COMPARE_OP's shift and mask);
//   - cache-entry counts come from the rows themselves.
// The one fact the table does not hold is 3.12's COMPARE_OP mask (the low
// four bits the specializer reads, compile.c's compare_masks); it is kept
// here and used only when the table says COMPARE_OP is CompareShift4.

// Index into the pop_jump_* arrays below.
enum class PopJumpCondition : uint8_t { False = 0, True = 1, None = 2, NotNone = 3 };

// Opcode numbers (-1 where the version has no such opcode) and encodings.
struct AssemblyTraits {
  const OpcodeTable* table = nullptr;
  int extended_arg = -1;
  int cache = -1;
  int nop = -1;
  int resume = -1;
  int load_fast = -1;
  int load_fast_check = -1;   // 3.12: LOAD_FAST that raises when unbound
  int store_fast = -1;
  int load_deref = -1;
  int store_deref = -1;
  int load_closure = -1;
  int make_cell = -1;
  int copy_free_vars = -1;
  int load_const = -1;
  int return_value = -1;
  int return_const = -1;      // 3.12 only
  int load_global = -1;
  int load_attr = -1;
  int load_method = -1;       // 3.11 only; 3.12 sets LOAD_ATTR's low bit
  int push_null = -1;
  int precall = -1;           // 3.11 only: precedes every CALL
  int call = -1;
  int kw_names = -1;
  int call_function_ex = -1;
  int build_tuple = -1;
  int build_list = -1;
  int build_map = -1;
  int unpack_sequence = -1;
  int pop_top = -1;
  int copy = -1;
  int swap = -1;
  int make_function = -1;
  int compare_op = -1;
  int binary_op = -1;
  int get_iter = -1;
  int end_for = -1;           // 3.12 only: FOR_ITER's exit lands after it
  int for_iter = -1;
  int jump_forward = -1;
  int jump_backward = -1;
  int jump_backward_no_interrupt = -1;
  int return_generator = -1;  // its frame resumes with the sent value pushed
  int raise_varargs = -1;
  int reraise = -1;
  std::array<int, 4> pop_jump_forward{-1, -1, -1, -1};   // by PopJumpCondition
  std::array<int, 4> pop_jump_backward{-1, -1, -1, -1};  // 3.11 only
  int jump_if_false_or_pop = -1;  // 3.11 only
  int jump_if_true_or_pop = -1;   // 3.11 only

  // LOAD_GLOBAL's oparg for co_names index `name` (low bit: push NULL).
  int load_global_arg(int name, bool push_null) const;
  // LOAD_ATTR's oparg for a plain attribute load of co_names index `name`.
  int load_attr_arg(int name) const;
  // Whether `opcode` never falls through to the next instruction (an
  // unconditional jump, a return or a raise).
  bool is_terminator(int opcode) const;
  // COMPARE_OP's oparg for a Py_LT..Py_GE code.
  int compare_arg(int py_compare_op) const;
};

// The traits of `table`, computed once per table and kept for the process.
// Throws base::InternalError if the table lacks an opcode every version has.
const AssemblyTraits& assembly_traits(const OpcodeTable& table);

// The opcode called `name` in `table`, or -1.
int opcode_by_name(const OpcodeTable& table, std::string_view name);

}  // namespace kiln::cpython
