// What a compiled graph runs through: the eager replay of a traced graph or
// the prim executor of its decomposition (backends "eager" and "aot_eager").
#pragma once

#include <Python.h>

namespace kiln::runtime {

// Runs one compiled graph. Implementations are immutable after
// construction, so one instance may serve concurrent calls (each holding
// the GIL).
class GraphExecutor {
 public:
  virtual ~GraphExecutor() = default;

  // Runs the graph; inputs[i] (borrowed) is the value of the traced graph's
  // i-th input. Returns a new reference to the output, or null with a
  // Python error set.
  virtual PyObject* run(PyObject* const* inputs) const = 0;

  // The backend's name for logs and tests ("eager", "aot_eager").
  virtual const char* name() const = 0;
};

}  // namespace kiln::runtime
