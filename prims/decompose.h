// Decomposition of a traced torch-level graph into a prim graph: each call
// of an op in stdlib's table becomes the prims its decomposition appends;
// any other call (and any call a decomposition does not handle) becomes an
// extern node calling the original callable. See docs/architecture.md,
// "Decompositions and aot_eager".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "prims/prim_graph.h"

namespace kiln::prims {

// A traced graph's decomposition.
struct Decomposition {
  std::shared_ptr<PrimGraph> graph;
  // The traced graph's output, its Node refs rewritten to prim value ids
  // (all among graph->outputs()).
  graph::Arg output;
  int decomposed_calls = 0;  // calls that became prims
  int extern_calls = 0;      // calls kept as externs
};

// Decomposes `traced`. `grad_enabled` says whether autograd records while
// the graph runs (input metas keep requires_grad only then). Returns
// nullopt, with *why set, for graphs kiln does not decompose yet: symbolic
// sizes, inputs that are not tensors, or non-tensor values that later nodes
// or the output use.
// `output`, when given, replaces the traced graph's output, and the nodes
// `skipped` marks are left out (Note [Output builders] in
// runtime/built_output_executor.h: calls that only build that output).
std::optional<Decomposition> decompose_graph(const graph::Graph& traced, bool grad_enabled,
                                             std::string* why, const graph::Arg* output = nullptr,
                                             const std::vector<bool>* skipped = nullptr);

}  // namespace kiln::prims
