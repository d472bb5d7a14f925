// Runs the calls that only build a graph's output after the graph itself.
#pragma once

#include <memory>
#include <vector>

#include "graph/graph.h"
#include "runtime/graph_executor.h"

namespace kiln::runtime {

// Note [Output builders]
// A frame that returns a namedtuple, an OrderedDict, a dataclass, or one
// container in two places gets graph nodes that only build that output
// from the tensors the graph computes: they make no tensor, and only the
// output and other such nodes use them. Prims, autograd and kernels take
// tensor graphs, so the backend compiles the graph without these nodes,
// its output the tuple of the values they and the output read (the
// leaves), and this executor runs them afterwards, in graph order, then
// builds the traced output. Without it such a graph ran through torch.

// The output-building nodes of `graph` (true at their ids), or all false.
std::vector<bool> output_builders(const graph::Graph& graph);

// The values (node ids) the builders and the output read that are not
// builders themselves, in first-use order: the inner graph's outputs.
std::vector<int> output_builder_leaves(const graph::Graph& graph, const std::vector<bool>& builders);

class BuiltOutputExecutor final : public GraphExecutor {
 public:
  // `inner` returns the tuple of the values of `leaves`; `graph` outlives
  // this executor (the cache entry keeps both).
  BuiltOutputExecutor(std::unique_ptr<GraphExecutor> inner, const graph::Graph& graph,
                      std::vector<bool> builders, std::vector<int> leaves);
  PyObject* run(PyObject* const* inputs) const override;
  const char* name() const override { return inner_->name(); }

 private:
  std::unique_ptr<GraphExecutor> inner_;
  const graph::Graph& graph_;
  std::vector<int> builder_ids_;  // in graph order
  std::vector<int> leaves_;
};

}  // namespace kiln::runtime
