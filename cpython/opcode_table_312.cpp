// CPython 3.12's opcodes as kiln sees them. See Note [Opcode tables] in
// opcode_table.h; tests/cpp/cpython/opcodes_312.txt is the reference
// this data is checked against.
#include "cpython/opcode_table.h"

#include <iterator>

namespace kiln::cpython {
namespace {

// Numbers missing here are ones dis.opname does not name (the adaptive
// specializations live in those gaps); they keep the default entry (no name,
// Unsupported). INSTRUMENTED_* are named but Unsupported: only monitoring
// rewrites code into them, and PyCode_GetCode undoes that.
// clang-format off
constexpr OpcodeEntry kRows[] = {
    {0, "CACHE", Op::Nop},
    {1, "POP_TOP", Op::PopTop},
    {2, "PUSH_NULL", Op::PushNull},
    {3, "INTERPRETER_EXIT", Op::Unsupported},
    {4, "END_FOR", Op::EndFor},
    {5, "END_SEND", Op::Nop},  // SEND already left only the return value (Op::Send)
    {9, "NOP", Op::Nop},
    {11, "UNARY_NEGATIVE", Op::UnaryNegative},
    {12, "UNARY_NOT", Op::UnaryNot},
    {15, "UNARY_INVERT", Op::UnaryInvert},
    {17, "RESERVED", Op::Unsupported},
    {25, "BINARY_SUBSCR", Op::BinarySubscr, 1},
    {26, "BINARY_SLICE", Op::BinarySlice},
    {27, "STORE_SLICE", Op::StoreSlice},
    {30, "GET_LEN", Op::GetLen},
    {31, "MATCH_MAPPING", Op::MatchMapping},
    {32, "MATCH_SEQUENCE", Op::MatchSequence},
    {33, "MATCH_KEYS", Op::MatchKeys},
    {35, "PUSH_EXC_INFO", Op::PushExcInfo},
    {36, "CHECK_EXC_MATCH", Op::CheckExcMatch},
    {37, "CHECK_EG_MATCH", Op::Unsupported},
    {49, "WITH_EXCEPT_START", Op::WithExceptStart},
    {50, "GET_AITER", Op::Unsupported},
    {51, "GET_ANEXT", Op::Unsupported},
    {52, "BEFORE_ASYNC_WITH", Op::Unsupported},
    {53, "BEFORE_WITH", Op::BeforeWith},
    {54, "END_ASYNC_FOR", Op::Unsupported},
    {55, "CLEANUP_THROW", Op::Unsupported},
    {60, "STORE_SUBSCR", Op::StoreSubscr, 1},
    {61, "DELETE_SUBSCR", Op::DeleteSubscr},
    {68, "GET_ITER", Op::GetIter},
    {69, "GET_YIELD_FROM_ITER", Op::GetYieldFromIter},
    {71, "LOAD_BUILD_CLASS", Op::Unsupported},
    {74, "LOAD_ASSERTION_ERROR", Op::Unsupported},
    {75, "RETURN_GENERATOR", Op::ReturnGenerator},
    {83, "RETURN_VALUE", Op::ReturnValue},
    {85, "SETUP_ANNOTATIONS", Op::Unsupported},
    {87, "LOAD_LOCALS", Op::Unsupported},
    {89, "POP_EXCEPT", Op::PopExcept},
    {90, "STORE_NAME", Op::Unsupported, 0, Operand::Name},
    {91, "DELETE_NAME", Op::Unsupported, 0, Operand::Name},
    {92, "UNPACK_SEQUENCE", Op::UnpackSequence, 1},
    {93, "FOR_ITER", Op::ForIter, 1, Operand::JumpForward},  // target: END_FOR, which exhaustion skips
    {94, "UNPACK_EX", Op::UnpackEx},
    {95, "STORE_ATTR", Op::StoreAttr, 4, Operand::Name},
    {96, "DELETE_ATTR", Op::DeleteAttr, 0, Operand::Name},
    {97, "STORE_GLOBAL", Op::StoreGlobal, 0, Operand::Name},
    {98, "DELETE_GLOBAL", Op::Unsupported, 0, Operand::Name},
    {99, "SWAP", Op::Swap},
    {100, "LOAD_CONST", Op::LoadConst, 0, Operand::Const},
    {101, "LOAD_NAME", Op::Unsupported, 0, Operand::Name},
    {102, "BUILD_TUPLE", Op::BuildTuple},
    {103, "BUILD_LIST", Op::BuildList},
    {104, "BUILD_SET", Op::BuildSet},
    {105, "BUILD_MAP", Op::BuildMap},
    {106, "LOAD_ATTR", Op::LoadAttr, 9, Operand::Name, ArgKind::AttrIndex},  // low bit: method load
    {107, "COMPARE_OP", Op::CompareOp, 1, Operand::Compare, ArgKind::CompareShift4},  // low four bits: specialization mask
    {108, "IMPORT_NAME", Op::ImportName, 0, Operand::Name},
    {109, "IMPORT_FROM", Op::ImportFrom, 0, Operand::Name},
    {110, "JUMP_FORWARD", Op::Jump, 0, Operand::JumpForward},
    {114, "POP_JUMP_IF_FALSE", Op::PopJumpIfFalse, 0, Operand::JumpForward},
    {115, "POP_JUMP_IF_TRUE", Op::PopJumpIfTrue, 0, Operand::JumpForward},
    {116, "LOAD_GLOBAL", Op::LoadGlobal, 4, Operand::Name, ArgKind::GlobalIndex},  // low bit: push NULL first
    {117, "IS_OP", Op::IsOp},
    {118, "CONTAINS_OP", Op::ContainsOp},
    {119, "RERAISE", Op::Reraise},
    {120, "COPY", Op::Copy},
    {121, "RETURN_CONST", Op::ReturnConst, 0, Operand::Const},
    {122, "BINARY_OP", Op::BinaryOp, 1, Operand::BinaryOp},
    {123, "SEND", Op::Send, 1, Operand::JumpForward},
    {124, "LOAD_FAST", Op::LoadFast, 0, Operand::Local},
    {125, "STORE_FAST", Op::StoreFast, 0, Operand::Local},
    {126, "DELETE_FAST", Op::DeleteFast, 0, Operand::Local},
    {127, "LOAD_FAST_CHECK", Op::LoadFast, 0, Operand::Local},  // LOAD_FAST that may raise UnboundLocalError
    {128, "POP_JUMP_IF_NOT_NONE", Op::PopJumpIfNotNone, 0, Operand::JumpForward},
    {129, "POP_JUMP_IF_NONE", Op::PopJumpIfNone, 0, Operand::JumpForward},
    {130, "RAISE_VARARGS", Op::RaiseVarargs},
    {131, "GET_AWAITABLE", Op::Unsupported},
    {132, "MAKE_FUNCTION", Op::MakeFunction, 0, Operand::MakeFunction},
    {133, "BUILD_SLICE", Op::BuildSlice},
    {134, "JUMP_BACKWARD_NO_INTERRUPT", Op::Jump, 0, Operand::JumpBackward},
    {135, "MAKE_CELL", Op::MakeCell, 0, Operand::Free},
    {136, "LOAD_CLOSURE", Op::LoadClosure, 0, Operand::Free},
    {137, "LOAD_DEREF", Op::LoadDeref, 0, Operand::Free},
    {138, "STORE_DEREF", Op::StoreDeref, 0, Operand::Free},
    {139, "DELETE_DEREF", Op::Unsupported, 0, Operand::Free},
    {140, "JUMP_BACKWARD", Op::Jump, 0, Operand::JumpBackward},
    {141, "LOAD_SUPER_ATTR", Op::LoadSuperAttr, 1, Operand::Name, ArgKind::SuperAttrIndex},  // low bit: method load
    {142, "CALL_FUNCTION_EX", Op::CallFunctionEx},
    {143, "LOAD_FAST_AND_CLEAR", Op::LoadFastAndClear, 0, Operand::Local},
    {144, "EXTENDED_ARG", Op::Nop},  // folded into the next instruction's raw_arg
    {145, "LIST_APPEND", Op::ListAppend},
    {146, "SET_ADD", Op::SetAdd},
    {147, "MAP_ADD", Op::MapAdd},
    {149, "COPY_FREE_VARS", Op::CopyFreeVars},
    {150, "YIELD_VALUE", Op::YieldValue},
    {151, "RESUME", Op::Resume},
    {152, "MATCH_CLASS", Op::MatchClass},
    {155, "FORMAT_VALUE", Op::FormatValue, 0, Operand::FormatValue},
    {156, "BUILD_CONST_KEY_MAP", Op::BuildConstKeyMap},
    {157, "BUILD_STRING", Op::BuildString},
    {162, "LIST_EXTEND", Op::ListExtend},
    {163, "SET_UPDATE", Op::SetUpdate},
    {164, "DICT_MERGE", Op::DictMerge},
    {165, "DICT_UPDATE", Op::DictUpdate},
    {171, "CALL", Op::Call, 3},
    {172, "KW_NAMES", Op::KwNames, 0, Operand::Const},
    {173, "CALL_INTRINSIC_1", Op::CallIntrinsic1, 0, Operand::Intrinsic1, ArgKind::Intrinsic1Op},  // op per function, see intrinsic1
    {174, "CALL_INTRINSIC_2", Op::Unsupported, 0, Operand::Intrinsic2},
    {175, "LOAD_FROM_DICT_OR_GLOBALS", Op::Unsupported, 0, Operand::Name},
    {176, "LOAD_FROM_DICT_OR_DEREF", Op::Unsupported, 0, Operand::Free},
    {237, "INSTRUMENTED_LOAD_SUPER_ATTR", Op::Unsupported},
    {238, "INSTRUMENTED_POP_JUMP_IF_NONE", Op::Unsupported},
    {239, "INSTRUMENTED_POP_JUMP_IF_NOT_NONE", Op::Unsupported},
    {240, "INSTRUMENTED_RESUME", Op::Unsupported},
    {241, "INSTRUMENTED_CALL", Op::Unsupported},
    {242, "INSTRUMENTED_RETURN_VALUE", Op::Unsupported},
    {243, "INSTRUMENTED_YIELD_VALUE", Op::Unsupported},
    {244, "INSTRUMENTED_CALL_FUNCTION_EX", Op::Unsupported},
    {245, "INSTRUMENTED_JUMP_FORWARD", Op::Unsupported},
    {246, "INSTRUMENTED_JUMP_BACKWARD", Op::Unsupported},
    {247, "INSTRUMENTED_RETURN_CONST", Op::Unsupported},
    {248, "INSTRUMENTED_FOR_ITER", Op::Unsupported},
    {249, "INSTRUMENTED_POP_JUMP_IF_FALSE", Op::Unsupported},
    {250, "INSTRUMENTED_POP_JUMP_IF_TRUE", Op::Unsupported},
    {251, "INSTRUMENTED_END_FOR", Op::Unsupported},
    {252, "INSTRUMENTED_END_SEND", Op::Unsupported},
    {253, "INSTRUMENTED_INSTRUCTION", Op::Unsupported},
    {254, "INSTRUMENTED_LINE", Op::Unsupported},
};
// clang-format on

// CALL_INTRINSIC_1's functions (opcode._intrinsic_1_descs); the two that
// replaced 3.11 opcodes decode as those opcodes' ops.
constexpr IntrinsicInfo kIntrinsic1[] = {
    {"INTRINSIC_1_INVALID", Op::Unsupported},
    {"INTRINSIC_PRINT", Op::CallIntrinsic1},
    {"INTRINSIC_IMPORT_STAR", Op::CallIntrinsic1},
    {"INTRINSIC_STOPITERATION_ERROR", Op::CallIntrinsic1},
    {"INTRINSIC_ASYNC_GEN_WRAP", Op::CallIntrinsic1},
    {"INTRINSIC_UNARY_POSITIVE", Op::UnaryPositive},
    {"INTRINSIC_LIST_TO_TUPLE", Op::ListToTuple},
    {"INTRINSIC_TYPEVAR", Op::CallIntrinsic1},
    {"INTRINSIC_PARAMSPEC", Op::CallIntrinsic1},
    {"INTRINSIC_TYPEVARTUPLE", Op::CallIntrinsic1},
    {"INTRINSIC_SUBSCRIPT_GENERIC", Op::CallIntrinsic1},
    {"INTRINSIC_TYPEALIAS", Op::CallIntrinsic1},
};

// CALL_INTRINSIC_2's functions (opcode._intrinsic_2_descs), named for
// format_bytecode only: CALL_INTRINSIC_2 itself is Unsupported.
constexpr IntrinsicInfo kIntrinsic2[] = {
    {"INTRINSIC_2_INVALID", Op::Unsupported},
    {"INTRINSIC_PREP_RERAISE_STAR", Op::Unsupported},
    {"INTRINSIC_TYPEVAR_WITH_BOUND", Op::Unsupported},
    {"INTRINSIC_TYPEVAR_WITH_CONSTRAINTS", Op::Unsupported},
    {"INTRINSIC_SET_FUNCTION_TYPE_PARAMS", Op::Unsupported},
};

constexpr OpcodeTable kTable = [] {
  OpcodeTable table = build_opcode_table(
      /*minor=*/12, /*have_argument=*/90, /*extended_arg=*/144, /*cache=*/0,
      kRows);
  for (size_t i = 0; i < std::size(kIntrinsic1); ++i)
    table.intrinsic1[i] = kIntrinsic1[i];
  for (size_t i = 0; i < std::size(kIntrinsic2); ++i)
    table.intrinsic2[i] = kIntrinsic2[i];
  return table;
}();

}  // namespace

const OpcodeTable& opcode_table_312() {
  return kTable;
}

}  // namespace kiln::cpython
