// CPython 3.11's opcodes as kiln sees them. See Note [Opcode tables] in
// opcode_table.h; tests/cpp/cpython/opcodes_311.txt is the reference
// this data is checked against.
#include "cpython/opcode_table.h"

namespace kiln::cpython {
namespace {

// Numbers missing here are ones dis.opname does not name (the adaptive
// specializations live in those gaps); they keep the default entry (no name,
// Unsupported).
// clang-format off
constexpr OpcodeEntry kRows[] = {
    {0, "CACHE", Op::Nop},
    {1, "POP_TOP", Op::PopTop},
    {2, "PUSH_NULL", Op::PushNull},
    {9, "NOP", Op::Nop},
    {10, "UNARY_POSITIVE", Op::UnaryPositive},
    {11, "UNARY_NEGATIVE", Op::UnaryNegative},
    {12, "UNARY_NOT", Op::UnaryNot},
    {15, "UNARY_INVERT", Op::UnaryInvert},
    {25, "BINARY_SUBSCR", Op::BinarySubscr, 4},
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
    {60, "STORE_SUBSCR", Op::StoreSubscr, 1},
    {61, "DELETE_SUBSCR", Op::DeleteSubscr},
    {68, "GET_ITER", Op::GetIter},
    {69, "GET_YIELD_FROM_ITER", Op::GetYieldFromIter},
    {70, "PRINT_EXPR", Op::Unsupported},
    {71, "LOAD_BUILD_CLASS", Op::Unsupported},
    {74, "LOAD_ASSERTION_ERROR", Op::Unsupported},
    {75, "RETURN_GENERATOR", Op::ReturnGenerator},
    {82, "LIST_TO_TUPLE", Op::ListToTuple},
    {83, "RETURN_VALUE", Op::ReturnValue},
    {84, "IMPORT_STAR", Op::Unsupported},
    {85, "SETUP_ANNOTATIONS", Op::Unsupported},
    {86, "YIELD_VALUE", Op::YieldValue},
    {87, "ASYNC_GEN_WRAP", Op::Unsupported},
    {88, "PREP_RERAISE_STAR", Op::Unsupported},
    {89, "POP_EXCEPT", Op::PopExcept},
    {90, "STORE_NAME", Op::Unsupported, 0, Operand::Name},
    {91, "DELETE_NAME", Op::Unsupported, 0, Operand::Name},
    {92, "UNPACK_SEQUENCE", Op::UnpackSequence, 1},
    {93, "FOR_ITER", Op::ForIter, 0, Operand::JumpForward},
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
    {106, "LOAD_ATTR", Op::LoadAttr, 4, Operand::Name},
    {107, "COMPARE_OP", Op::CompareOp, 2, Operand::Compare},
    {108, "IMPORT_NAME", Op::ImportName, 0, Operand::Name},
    {109, "IMPORT_FROM", Op::ImportFrom, 0, Operand::Name},
    {110, "JUMP_FORWARD", Op::Jump, 0, Operand::JumpForward},
    {111, "JUMP_IF_FALSE_OR_POP", Op::JumpIfFalseOrPop, 0, Operand::JumpForward},
    {112, "JUMP_IF_TRUE_OR_POP", Op::JumpIfTrueOrPop, 0, Operand::JumpForward},
    {114, "POP_JUMP_FORWARD_IF_FALSE", Op::PopJumpIfFalse, 0, Operand::JumpForward},
    {115, "POP_JUMP_FORWARD_IF_TRUE", Op::PopJumpIfTrue, 0, Operand::JumpForward},
    {116, "LOAD_GLOBAL", Op::LoadGlobal, 5, Operand::Name, ArgKind::GlobalIndex},  // low bit: push NULL first
    {117, "IS_OP", Op::IsOp},
    {118, "CONTAINS_OP", Op::ContainsOp},
    {119, "RERAISE", Op::Reraise},
    {120, "COPY", Op::Copy},
    {122, "BINARY_OP", Op::BinaryOp, 1, Operand::BinaryOp},
    {123, "SEND", Op::Send, 0, Operand::JumpForward},
    {124, "LOAD_FAST", Op::LoadFast, 0, Operand::Local},
    {125, "STORE_FAST", Op::StoreFast, 0, Operand::Local},
    {126, "DELETE_FAST", Op::DeleteFast, 0, Operand::Local},
    {128, "POP_JUMP_FORWARD_IF_NOT_NONE", Op::PopJumpIfNotNone, 0, Operand::JumpForward},
    {129, "POP_JUMP_FORWARD_IF_NONE", Op::PopJumpIfNone, 0, Operand::JumpForward},
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
    {142, "CALL_FUNCTION_EX", Op::CallFunctionEx},
    {144, "EXTENDED_ARG", Op::Nop},  // folded into the next instruction's raw_arg
    {145, "LIST_APPEND", Op::ListAppend},
    {146, "SET_ADD", Op::SetAdd},
    {147, "MAP_ADD", Op::MapAdd},
    {148, "LOAD_CLASSDEREF", Op::Unsupported, 0, Operand::Free},
    {149, "COPY_FREE_VARS", Op::CopyFreeVars},
    {151, "RESUME", Op::Resume},
    {152, "MATCH_CLASS", Op::MatchClass},
    {155, "FORMAT_VALUE", Op::FormatValue, 0, Operand::FormatValue},
    {156, "BUILD_CONST_KEY_MAP", Op::BuildConstKeyMap},
    {157, "BUILD_STRING", Op::BuildString},
    {160, "LOAD_METHOD", Op::LoadAttr, 10, Operand::Name, ArgKind::Raw, kMethod},  // pushes [NULL, attr] or [method, self]
    {162, "LIST_EXTEND", Op::ListExtend},
    {163, "SET_UPDATE", Op::SetUpdate},
    {164, "DICT_MERGE", Op::DictMerge},
    {165, "DICT_UPDATE", Op::DictUpdate},
    {166, "PRECALL", Op::CallSetup, 1},  // bookkeeping before CALL
    {171, "CALL", Op::Call, 4},
    {172, "KW_NAMES", Op::KwNames, 0, Operand::Const},
    {173, "POP_JUMP_BACKWARD_IF_NOT_NONE", Op::PopJumpIfNotNone, 0, Operand::JumpBackward},
    {174, "POP_JUMP_BACKWARD_IF_NONE", Op::PopJumpIfNone, 0, Operand::JumpBackward},
    {175, "POP_JUMP_BACKWARD_IF_FALSE", Op::PopJumpIfFalse, 0, Operand::JumpBackward},
    {176, "POP_JUMP_BACKWARD_IF_TRUE", Op::PopJumpIfTrue, 0, Operand::JumpBackward},
};
// clang-format on

constexpr OpcodeTable kTable = build_opcode_table(
    /*minor=*/11, /*have_argument=*/90, /*extended_arg=*/144, /*cache=*/0,
    kRows);

}  // namespace

const OpcodeTable& opcode_table_311() {
  return kTable;
}

}  // namespace kiln::cpython
