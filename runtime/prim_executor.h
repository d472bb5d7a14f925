// Runs a PrimGraph through torch: one torch call per prim (torch.add,
// torch.sum, Tensor.view, torch.cat, ...), each prepared once at
// construction so a call only fills argument slots and calls. Values are
// released right after their last use. Random prims draw from torch's
// default generator, so torch.manual_seed fixes their results.
#pragma once

#include <Python.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "graph/graph.h"
#include "prims/prim_graph.h"
#include "runtime/graph_executor.h"

namespace kiln::runtime {

// Thrown at construction for a node the executor cannot run; the message
// names the node and why ("prim executor: node 3 (prod): ...").
class PrimExecutorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A prim graph prepared for running through torch. Immutable after
// construction; one instance may serve concurrent calls (each holding the GIL).
class PrimExecutor final : public GraphExecutor {
 public:
  // Prepares `graph`. run() returns `output` built from the graph's values
  // (its Node refs are value ids, which must be among graph->outputs());
  // without `output`, run() returns the tuple of graph->outputs(). Throws
  // PrimExecutorError for a node it cannot run, or a Python-side failure
  // preparing constants.
  explicit PrimExecutor(std::shared_ptr<const prims::PrimGraph> graph);
  PrimExecutor(std::shared_ptr<const prims::PrimGraph> graph, graph::Arg output);
  PrimExecutor(const PrimExecutor&) = delete;
  PrimExecutor& operator=(const PrimExecutor&) = delete;
  ~PrimExecutor() override;

  // Runs the graph; inputs[i] (borrowed) is the value of graph->inputs()[i].
  // Returns a new reference to the output, or null with a Python error set.
  PyObject* run(PyObject* const* inputs) const override;
  const char* name() const override { return "aot_eager"; }

  // Runs the graph and stores new references to the values of
  // graph->outputs() in `outputs`. Returns false, with a Python error set and
  // nothing stored, when an op raises.
  bool run_values(PyObject* const* inputs, PyObject** outputs) const;

  const prims::PrimGraph& graph() const { return *graph_; }

  // Keeps, between runs, the results of the nodes marked in `nodes` (one
  // flag per graph node) when every tensor they read is an nn.Parameter
  // unchanged since (Note [Kernels of parameters]). The caller marks only
  // nodes whose results nothing writes or returns. Call before any run().
  void memoize_nodes(const std::vector<bool>& nodes);

 private:
  struct Step;
  // Runs every node, leaving the graph's outputs in `values` (which holds
  // one slot per value). Returns false with a Python error set and every
  // slot cleared when an op raises.
  bool execute(PyObject* const* inputs, PyObject** values) const;

  struct Memo;
  // The memoized step's result when its inputs are the parameters it last
  // ran on, unchanged; else null. `inputs` are the step's input values.
  PyObject* memoized(size_t step, PyObject* const* values) const;
  // The step's result through its ATen call from C++ (Note [Native views]);
  // null with a Python error set when torch raises.
  static PyObject* run_native(const Step& step, PyObject* const* values);
  // Records `result` as the memoized step's result for its current inputs.
  void remember(size_t step, PyObject* const* values, PyObject* result) const;

  std::shared_ptr<const prims::PrimGraph> graph_;
  graph::Arg output_;
  // Per step, its memo (Note [Kernels of parameters]); mutable: runs hold
  // the GIL, which guards it.
  mutable std::vector<std::unique_ptr<Memo>> memos_;
  std::vector<Step> steps_;               // one per node
  std::vector<int> input_release_;        // inputs no node or output uses
};

}  // namespace kiln::runtime
