// kiln's PEP 523 frame evaluator: looks up a frame's code cache, checks
// guards, runs a cached graph or traces a new one, and otherwise lets
// CPython run the frame.
#pragma once

#include <Python.h>

namespace kiln::interpreter {

// Keeps kiln's evaluator installed while at least one compiled call runs
// on any thread (Note [Hook lifetime]). Construct with the GIL held.
class CompiledRegion {
 public:
  CompiledRegion();
  ~CompiledRegion();
  CompiledRegion(const CompiledRegion&) = delete;
  CompiledRegion& operator=(const CompiledRegion&) = delete;
};

// Registers the Python exception types raised for fullgraph failures
// (kiln.Unsupported) and for recompiles under the fail_on_recompile stance
// (kiln.RecompileError); takes references.
void set_error_types(PyObject* unsupported, PyObject* recompile);

}  // namespace kiln::interpreter
