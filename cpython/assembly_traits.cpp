// Assembly traits read off the opcode tables; see Note [Assembly traits].
#include "cpython/assembly_traits.h"

#include "base/check.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace kiln::cpython {
namespace {

// compile.c's compare_masks (3.12): the low four bits of COMPARE_OP, read by
// its specializations (COMPARISON_UNORDERED 1, LESS_THAN 2, GREATER_THAN 4,
// EQUALS 8), indexed by Py_LT..Py_GE.
constexpr int kCompareMasks[] = {2, 2 | 8, 8, 1 | 2 | 4, 4, 4 | 8};

// The opcode whose row has the given op and operand, or -1.
int opcode_with(const OpcodeTable& table, Op op, Operand operand) {
  for (size_t i = 0; i < table.ops.size(); ++i) {
    const OpcodeInfo& info = table.ops[i];
    if (info.name != nullptr && info.op == op && info.operand == operand &&
        std::strncmp(info.name, "INSTRUMENTED_", 13) != 0)
      return static_cast<int>(i);
  }
  return -1;
}

AssemblyTraits compute_traits(const OpcodeTable& table) {
  AssemblyTraits t;
  t.table = &table;
  const auto need = [&](const char* name) {
    const int opcode = opcode_by_name(table, name);
    KILN_CHECK(opcode >= 0, "opcode table 3." << table.minor << " has no " << name);
    return opcode;
  };
  const auto maybe = [&](const char* name) {
    return opcode_by_name(table, name);
  };
  t.extended_arg = table.extended_arg;
  t.cache = table.cache;
  t.nop = need("NOP");
  t.resume = need("RESUME");
  t.load_fast = need("LOAD_FAST");
  t.load_fast_check = maybe("LOAD_FAST_CHECK");
  t.store_fast = need("STORE_FAST");
  t.load_deref = need("LOAD_DEREF");
  t.store_deref = need("STORE_DEREF");
  t.load_closure = need("LOAD_CLOSURE");
  t.make_cell = need("MAKE_CELL");
  t.copy_free_vars = need("COPY_FREE_VARS");
  t.load_const = need("LOAD_CONST");
  t.return_value = need("RETURN_VALUE");
  t.return_const = maybe("RETURN_CONST");
  t.load_global = need("LOAD_GLOBAL");
  t.load_attr = need("LOAD_ATTR");
  t.load_method = maybe("LOAD_METHOD");
  t.push_null = need("PUSH_NULL");
  t.precall = maybe("PRECALL");
  t.call = need("CALL");
  t.kw_names = need("KW_NAMES");
  t.call_function_ex = need("CALL_FUNCTION_EX");
  t.build_tuple = need("BUILD_TUPLE");
  t.build_list = need("BUILD_LIST");
  t.build_map = need("BUILD_MAP");
  t.unpack_sequence = need("UNPACK_SEQUENCE");
  t.pop_top = need("POP_TOP");
  t.copy = need("COPY");
  t.swap = need("SWAP");
  t.make_function = need("MAKE_FUNCTION");
  t.compare_op = need("COMPARE_OP");
  t.binary_op = need("BINARY_OP");
  t.get_iter = need("GET_ITER");
  t.end_for = maybe("END_FOR");
  t.for_iter = need("FOR_ITER");
  t.jump_forward = need("JUMP_FORWARD");
  t.jump_backward = need("JUMP_BACKWARD");
  t.jump_backward_no_interrupt = need("JUMP_BACKWARD_NO_INTERRUPT");
  t.return_generator = need("RETURN_GENERATOR");
  t.raise_varargs = need("RAISE_VARARGS");
  t.reraise = need("RERAISE");
  const Op conditions[] = {Op::PopJumpIfFalse, Op::PopJumpIfTrue,
                           Op::PopJumpIfNone, Op::PopJumpIfNotNone};
  for (size_t i = 0; i < 4; ++i) {
    t.pop_jump_forward[i] =
        opcode_with(table, conditions[i], Operand::JumpForward);
    t.pop_jump_backward[i] =
        opcode_with(table, conditions[i], Operand::JumpBackward);
    KILN_CHECK(t.pop_jump_forward[i] >= 0, "opcode table 3." << table.minor << " has no forward conditional jump");
  }
  t.jump_if_false_or_pop =
      opcode_with(table, Op::JumpIfFalseOrPop, Operand::JumpForward);
  t.jump_if_true_or_pop =
      opcode_with(table, Op::JumpIfTrueOrPop, Operand::JumpForward);
  return t;
}

}  // namespace

int AssemblyTraits::load_global_arg(int name, bool push_null) const {
  return table->ops[load_global].arg == ArgKind::GlobalIndex
             ? (name << 1) | (push_null ? 1 : 0)
             : name;
}

int AssemblyTraits::load_attr_arg(int name) const {
  return table->ops[load_attr].arg == ArgKind::AttrIndex ? name << 1 : name;
}

bool AssemblyTraits::is_terminator(int opcode) const {
  return opcode == jump_forward || opcode == jump_backward ||
         opcode == jump_backward_no_interrupt || opcode == return_value ||
         (return_const >= 0 && opcode == return_const) ||
         opcode == raise_varargs || opcode == reraise;
}

int AssemblyTraits::compare_arg(int py_compare_op) const {
  if (table->ops[compare_op].arg != ArgKind::CompareShift4)
    return py_compare_op;
  const int mask = py_compare_op >= 0 && py_compare_op < 6
                       ? kCompareMasks[py_compare_op]
                       : 0;
  return (py_compare_op << 4) | mask;
}

int opcode_by_name(const OpcodeTable& table, std::string_view name) {
  for (size_t i = 0; i < table.ops.size(); ++i) {
    const char* entry = table.ops[i].name;
    if (entry != nullptr && name == entry) return static_cast<int>(i);
  }
  return -1;
}

const AssemblyTraits& assembly_traits(const OpcodeTable& table) {
  static const AssemblyTraits traits_311 = compute_traits(opcode_table_311());
  static const AssemblyTraits traits_312 = compute_traits(opcode_table_312());
  if (&table == &opcode_table_311()) return traits_311;
  if (&table == &opcode_table_312()) return traits_312;
  throw std::invalid_argument("no assembly traits for this opcode table");
}

}  // namespace kiln::cpython
