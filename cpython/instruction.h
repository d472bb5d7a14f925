// kiln's normalized bytecode instruction: what the tracer sees instead of
// CPython's per-version opcodes. See Note [Normalized instructions].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cpython {

// Note [Normalized instructions]
// Every opcode of every supported Python version maps to exactly one Op
// below (opcodes with no meaning for tracing map to Nop, opcodes kiln does
// not model map to Unsupported). Arguments are normalized so that the tracer
// needs no version checks:
//   - jump targets are instruction indices into the decoded stream (target);
//   - CompareOp's arg is a Py_LT..Py_GE code on every version;
//   - a method load (3.11 LOAD_METHOD, 3.12 LOAD_ATTR with low bit) is
//     LoadAttr with flags & kMethod;
//   - LoadGlobal's arg is the co_names index, flags & kPushNull says that a
//     NULL is pushed first.
// The op list is written once here and expanded into the enum and names.
//
//  X(name, comment-on-arg)
#define KILN_OP_LIST(X)                                                        \
  X(Nop, "no effect on tracing (NOP, CACHE, ...)")                            \
  X(Resume, "no effect on tracing; the function body starts after it")        \
  X(CallSetup, "no effect on tracing; bookkeeping of the next call (PRECALL)") \
  X(Unsupported, "an opcode kiln does not model; raw_name says which")         \
  X(LoadFast, "arg: localsplus index")                                         \
  X(LoadFastAndClear, "arg: localsplus index; pushes value (or NULL), clears") \
  X(StoreFast, "arg: localsplus index")                                        \
  X(DeleteFast, "arg: localsplus index")                                       \
  X(LoadConst, "arg: co_consts index")                                         \
  X(ReturnConst, "arg: co_consts index")                                       \
  X(ReturnValue, "")                                                           \
  X(LoadGlobal, "arg: co_names index; flags&kPushNull: push NULL first")       \
  X(StoreGlobal, "arg: co_names index")                                        \
  X(LoadAttr, "arg: co_names index; flags&kMethod: method load, pushes "      \
               "[NULL, attr] or [method, self]")                               \
  X(StoreAttr, "arg: co_names index")                                          \
  X(DeleteAttr, "arg: co_names index")                                         \
  X(LoadDeref, "arg: localsplus index of the cell/free var")                   \
  X(StoreDeref, "arg: localsplus index of the cell/free var")                  \
  X(LoadClosure, "arg: localsplus index of the cell/free var")                 \
  X(MakeCell, "arg: localsplus index")                                         \
  X(CopyFreeVars, "arg: number of free vars")                                  \
  X(PushNull, "")                                                              \
  X(PopTop, "")                                                                \
  X(Copy, "arg: n (1 = top)")                                                  \
  X(Swap, "arg: n (2 = top two)")                                              \
  X(UnaryNegative, "")                                                         \
  X(UnaryPositive, "")                                                         \
  X(UnaryNot, "")                                                              \
  X(UnaryInvert, "")                                                           \
  X(BinaryOp, "arg: NB_* code (same numbering on 3.11 and 3.12)")              \
  X(CompareOp, "arg: Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE")                \
  X(IsOp, "arg: 1 for 'is not'")                                               \
  X(ContainsOp, "arg: 1 for 'not in'")                                         \
  X(BinarySubscr, "")                                                          \
  X(StoreSubscr, "")                                                           \
  X(DeleteSubscr, "")                                                          \
  X(BinarySlice, "container[start:end] (3.12)")                                \
  X(StoreSlice, "container[start:end] = v (3.12)")                             \
  X(BuildSlice, "arg: 2 or 3")                                                 \
  X(BuildTuple, "arg: count")                                                  \
  X(BuildList, "arg: count")                                                   \
  X(BuildSet, "arg: count")                                                    \
  X(BuildMap, "arg: count of pairs")                                           \
  X(BuildConstKeyMap, "arg: count")                                            \
  X(BuildString, "arg: count")                                                 \
  X(FormatValue, "arg: raw FORMAT_VALUE flags")                                \
  X(ListAppend, "arg: stack depth of the list")                                \
  X(ListExtend, "arg: stack depth of the list")                                \
  X(ListToTuple, "")                                                           \
  X(SetAdd, "arg: stack depth of the set")                                     \
  X(SetUpdate, "arg: stack depth of the set")                                  \
  X(MapAdd, "arg: stack depth of the dict")                                    \
  X(DictUpdate, "arg: stack depth of the dict")                                \
  X(DictMerge, "arg: stack depth of the dict")                                 \
  X(UnpackSequence, "arg: count")                                              \
  X(UnpackEx, "arg: raw oparg (low byte before, high byte after)")             \
  X(KwNames, "arg: co_consts index of the tuple of keyword names")             \
  X(Call, "arg: argc (excluding self); stack [NULL|method, callable|self, "   \
          "args...]")                                                          \
  X(CallFunctionEx, "arg: 1 if a kwargs dict is on the stack")                 \
  X(CallIntrinsic1, "arg: raw intrinsic number (3.12)")                        \
  X(MakeFunction, "arg: raw MAKE_FUNCTION flags")                              \
  X(Jump, "unconditional; target")                                             \
  X(PopJumpIfFalse, "target")                                                  \
  X(PopJumpIfTrue, "target")                                                   \
  X(PopJumpIfNone, "target")                                                   \
  X(PopJumpIfNotNone, "target")                                                \
  X(JumpIfFalseOrPop, "target (3.11)")                                         \
  X(JumpIfTrueOrPop, "target (3.11)")                                          \
  X(GetIter, "")                                                               \
  X(ForIter, "target: where dis says the loop exits (3.12: its END_FOR, "     \
             "which an exhausted loop skips)")                                 \
  X(EndFor, "3.12: pops the exhausted iterator's two slots")                   \
  X(GetLen, "pushes len(TOS), keeping TOS")                                    \
  X(MatchSequence, "pushes whether TOS is a sequence for `match`")             \
  X(MatchMapping, "pushes whether TOS is a mapping for `match`")               \
  X(MatchKeys, "stack [subject, keys]: pushes a tuple of the values or None")   \
  X(MatchClass, "arg: count of positional sub-patterns; pops [subject, cls, "  \
                "names], pushes a tuple of attributes or None")               \
  X(LoadSuperAttr, "arg: co_names index; flags&kMethod as LoadAttr; pops "     \
                   "[super, class, self] and loads super(class, self).name")  \
  X(ImportName, "arg: co_names index; pops [level, fromlist], pushes the module")  \
  X(ImportFrom, "arg: co_names index; pushes getattr(TOS, name), keeping TOS")     \
  X(BeforeWith, "pushes the context manager's __exit__, then __enter__()'s result") \
  X(ReturnGenerator, "generator prologue; the frame resumes with None pushed")   \
  X(YieldValue, "pops the yielded value; resumes with the sent value pushed") \
  X(GetYieldFromIter, "`yield from`: TOS becomes iter(TOS)")                  \
  X(Send, "target: where a `yield from` ends; stack [iterator, sent]: "      \
          "pushes the next item, or at the iterator's end jumps with its "      \
          "return value in the iterator's slot (3.12's END_SEND then pops "    \
          "nothing)")                                                         \
  X(PushExcInfo, "handler entry: pops exc, pushes the handled exception, then exc") \
  X(PopExcept, "pops the handled exception to restore")                          \
  X(CheckExcMatch, "pops a type (or tuple); pushes whether TOS (an exception) matches") \
  X(Reraise, "arg: nonzero if a lasti slot sits below; pops and raises TOS")      \
  X(RaiseVarargs, "arg: 0 re-raise, 1 raise TOS, 2 raise TOS1 from TOS")         \
  X(WithExceptStart, "calls a with-block's __exit__ with the exception")

// One normalized operation.
enum class Op : uint8_t {
#define KILN_OP_ENUM(name, doc) name,
  KILN_OP_LIST(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};

// Flag bits of Instruction::flags.
inline constexpr uint8_t kPushNull = 1;  // LoadGlobal: push NULL before value
inline constexpr uint8_t kMethod = 2;    // LoadAttr: method-style load

// One decoded instruction. Offsets are in bytes of co_code; indices count
// decoded instructions (CACHE entries and EXTENDED_ARG prefixes are folded
// into the instruction they belong to).
struct Instruction {
  Op op = Op::Nop;
  uint8_t flags = 0;
  int32_t arg = 0;          // normalized argument, see KILN_OP_LIST
  int32_t index = 0;        // position in the decoded stream
  int32_t offset = 0;       // byte offset of the opcode in co_code
  int32_t target = -1;      // jump target as an instruction index, or -1
  int32_t line = -1;        // source line, or -1 when CPython has none
  uint8_t raw_opcode = 0;   // the running version's opcode number
  int32_t raw_arg = 0;      // oparg including EXTENDED_ARG prefixes
  const char* raw_name = "";  // CPython's opcode name, e.g. "LOAD_METHOD"
};

// Returns the Op's name, e.g. "LoadFast".
const char* op_name(Op op);

}  // namespace kiln::cpython
