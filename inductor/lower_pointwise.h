// From prims to pointwise kernels: which elementwise prims fuse into one
// kernel (find_pointwise_groups) and the kernel computing a group
// (lower_pointwise). Views between the prims fold into the kernel's
// indexing. See docs/architecture.md, "Inductor (CPU), first slice".
#pragma once

#include <stdexcept>
#include <vector>

#include "inductor/kernel_ir.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// Thrown for a group lower_pointwise cannot compute; the message names the
// node and why.
class LoweringError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Prim nodes that become one kernel, in graph order. The last node's
// output is the group's result; every other node's outputs are used only
// inside the group.
struct PointwiseGroup {
  std::vector<int> nodes;
};

// A group's kernel and what to bind to it: kernel input i reads (through
// the kernel's strides and offset) the storage of prim value inputs[i];
// output i is prim value outputs[i].
struct LoweredKernel {
  Kernel kernel;
  std::vector<int> inputs;
  std::vector<int> outputs;
};

// Finds the fusion groups of `graph` (Note [Pointwise fusion]): maximal
// trees of elementwise prims (unary, binary, where, convert_element_type)
// and the views between them, whose intermediates are used only inside the
// tree. Groups without an elementwise prim are not returned.
std::vector<PointwiseGroup> find_pointwise_groups(const prims::PrimGraph& graph);

// The kernel computing `group`'s result. Throws LoweringError.
LoweredKernel lower_pointwise(const prims::PrimGraph& graph, const PointwiseGroup& group);

}  // namespace kiln::inductor
