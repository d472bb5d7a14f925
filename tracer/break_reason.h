// Why a trace stopped: a closed table of reasons, each with a hint for the
// user. Thrown as TraceAbort inside the tracer, reported with file:line.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln::tracer {

//  X(code, hint)
#define KILN_BREAK_REASONS(X)                                                          \
  X(UnsupportedOpcode, "this bytecode instruction is not traced yet")                  \
  X(DataDependent, "the result depends on tensor values; compute it outside the "      \
                   "compiled region or keep the decision on Python values and shapes") \
  X(UnsupportedCall, "the called object is neither a torch op nor plain Python code "  \
                     "kiln can inline; wrap the call with kiln.disable or move it out") \
  X(UnsupportedAttribute, "this attribute access cannot be traced")                    \
  X(UnsupportedOperator, "this operator is not supported on these operand types")      \
  X(ShapeInference, "torch could not run this op on meta tensors to infer its result")  \
  X(SideEffect, "the code changes state outside the traced frame (printing, "          \
                "mutation of globals, attributes or inputs)")                           \
  X(UnboundName, "a name is read before it is assigned")                               \
  X(PythonException, "the traced code raises an exception here")                       \
  X(InlineDepth, "calls nest too deeply to inline")                                     \
  X(UnsupportedValue, "a value of this type cannot enter a graph")                       \
  X(UnsupportedFrame, "this kind of frame is not traced")

enum class BreakCode {
#define KILN_BREAK_ENUM(code, hint) code,
  KILN_BREAK_REASONS(KILN_BREAK_ENUM)
#undef KILN_BREAK_ENUM
};

// Returns the code's name, e.g. "DataDependent".
const char* break_code_name(BreakCode code);

// Returns the code's hint for users.
const char* break_code_hint(BreakCode code);

// Thrown inside the tracer to abandon a trace.
class TraceAbort : public std::runtime_error {
 public:
  TraceAbort(BreakCode code, const std::string& message)
      : std::runtime_error(message), code(code) {}
  BreakCode code;
  std::string location;  // "file.py:12", filled where the instruction is known
  std::string detail;    // why no graph break could be made here, if tried
};

}  // namespace kiln::tracer
