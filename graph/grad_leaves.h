// Tensors a graph makes into autograd leaves that no one can observe
// (Note [Grad leaves made in a graph]).
#pragma once

#include "graph/graph.h"

namespace kiln::graph {

// Whether `node` is Tensor.requires_grad_() on a tensor the graph made
// without history whose gradient no one can read: neither it nor its
// argument leaves the graph, and every output torch makes require grad
// reaches an input requiring grad by another path. Differentiating as if
// the call were not there changes no result.
bool is_unobservable_grad_leaf(const Graph& graph, const Node& node);

}  // namespace kiln::graph
