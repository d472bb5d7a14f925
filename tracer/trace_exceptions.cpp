// try/except/finally: which instructions a user's handler protects. See
// Note [Tracing try blocks].
#include <cstring>

#include "interpreter/exception_table.h"
#include "tracer/trace_state.h"

namespace kiln::tracer {

// Note [Tracing try blocks]
// CPython 3.11+ reaches a handler only through the exception table, never
// by a jump, so the tracer follows the path on which nothing raises: the
// protected body, then the code after it (a `finally` body is compiled
// inline on that path too). When the body does not raise while tracing,
// the handler is dead code for this trace.
//
// Where the trace stops inside a protected body, a graph break is not
// made: the transformed code would run the instruction outside the try, so
// an exception it raises would skip the user's handler. The frame runs
// eagerly instead (with the reason), which keeps the handler's semantics.
// A trace that stops because the body raises (a KeyError of a dict lookup,
// an op that fails on its fake tensors) therefore also runs the frame
// eagerly, and the handler runs as written. A try inside an inlined callee
// needs nothing more: if the callee's trace stops, the break is made at
// the caller's call instruction and CPython runs the whole call.
//
// What the graph cannot give: an op that passes on meta tensors but fails
// on real data (a cholesky of a matrix that is not positive definite)
// raises out of the compiled graph, where the handler does not see it.
// Handlers for such data-dependent failures need the frame to run eagerly
// (kiln.disable).
//
// Handlers of with-blocks (PUSH_EXC_INFO then WITH_EXCEPT_START) are not
// user handlers: traced with-blocks restore their state in the graph.

std::vector<bool> user_try_coverage(PyCodeObject* code, const std::vector<interpreter::Instruction>& instructions) {
  std::vector<bool> covered(instructions.size(), false);
  PyRef table = PyRef::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_exceptiontable"));
  if (!table || !PyBytes_Check(table.get())) {
    PyErr_Clear();
    return covered;
  }
  std::vector<interpreter::ExceptionTableEntry> entries;
  if (!interpreter::decode_exception_table(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table.get())),
                                           static_cast<size_t>(PyBytes_GET_SIZE(table.get())), &entries)) {
    // Unreadable: treat every instruction as protected (no breaks, ever).
    covered.assign(instructions.size(), true);
    return covered;
  }
  for (const auto& entry : entries) {
    // The handler's first instruction says what kind of handler it is.
    size_t handler = 0;
    while (handler < instructions.size() && instructions[handler].offset < 2 * entry.target) ++handler;
    if (handler >= instructions.size()) continue;
    const bool pushes_exception = std::strcmp(instructions[handler].raw_name, "PUSH_EXC_INFO") == 0;
    const bool with_exit = handler + 1 < instructions.size() &&
                           std::strcmp(instructions[handler + 1].raw_name, "WITH_EXCEPT_START") == 0;
    if (!pushes_exception || with_exit) continue;
    for (size_t k = 0; k < instructions.size(); ++k) {
      const int unit = instructions[k].offset / 2;
      if (unit >= entry.start && unit < entry.end) covered[k] = true;
    }
  }
  return covered;
}

}  // namespace kiln::tracer
