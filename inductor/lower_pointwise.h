// From prims to pointwise kernels: which elementwise prims fuse into one
// kernel (find_pointwise_groups) and the kernel computing a group
// (lower_pointwise). Views between the prims fold into the kernel's
// indexing. See docs/architecture.md, "Inductor (CPU)".
#pragma once

#include <vector>

#include "inductor/lower_values.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// Prim nodes that become one kernel, in graph order. The last node's
// output is the group's result; every other node's outputs are used only
// inside the group.
struct PointwiseGroup {
  std::vector<int> nodes;
};

// Finds the fusion groups of `graph` (Note [Pointwise fusion]): maximal
// trees of elementwise prims (unary, binary, where, convert_element_type)
// and the views between them, whose intermediates are used only inside the
// tree. Groups without an elementwise prim are not returned.
std::vector<PointwiseGroup> find_pointwise_groups(const prims::PrimGraph& graph);

// The kernel computing `group`'s result. Throws LoweringError.
LoweredKernel lower_pointwise(const prims::PrimGraph& graph, const PointwiseGroup& group);

}  // namespace kiln::inductor
