// A backend given as a callable, torch.compile's custom-backend contract:
// kiln.compile(fn, backend=my_backend) calls my_backend(gm, example_inputs)
// with each captured graph as a torch.fx.GraphModule and runs what it
// returns (kiln._fx).
#pragma once

#include <Python.h>

#include <vector>

#include "graph/graph.h"
#include "runtime/graph_executor.h"
#include "base/py_ref.h"

namespace kiln::runtime {

// `graph` handed to a user's backend callable. The backend runs on the
// first call, with that call's inputs as its example inputs.
class CallableBackendExecutor final : public GraphExecutor {
 public:
  // Builds the GraphModule of `graph` (which need not outlive the
  // executor) without the nodes marked in `skipped` (when given), returning
  // `output` (when given) instead of the graph's output. Check ok() after:
  // false, with a Python error set, when kiln._fx could not build it.
  CallableBackendExecutor(const graph::Graph& graph, PyObject* backend, const std::vector<bool>* skipped = nullptr,
                          const graph::Arg* output = nullptr);

  // True when the GraphModule was built.
  bool ok() const { return static_cast<bool>(runner_); }

  // Runs the graph through the backend's callable (compiled on first use).
  PyObject* run(PyObject* const* inputs) const override;
  const char* name() const override { return "callable"; }

 private:
  base::PyRef runner_;  // kiln._fx.CompiledByBackend
  size_t input_count_ = 0;
};

}  // namespace kiln::runtime
