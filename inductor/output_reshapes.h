// Kernel outputs allocated in the shape of the one view (reshape, permute) that reads them.
// See Note [Kernel outputs in their readers' shape] in output_reshapes.cpp.
#pragma once

#include <vector>

#include "inductor/lower_group.h"
#include "inductor/lower_values.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// For each lowered kernel whose output is read outside its group only by
// one permute, or one reshape or view of a contiguous value to a contiguous
// result (in no group, the output no graph output), makes the kernel's
// tensor that view's result: the reshape joins the group's nodes and the lowered
// output names its value. `groups[i]` is the group lowered as `lowered[i]`.
// Returns how many reshapes were absorbed.
int absorb_output_reshapes(const prims::PrimGraph& graph, std::vector<KernelGroup>& groups,
                           std::vector<LoweredKernel>& lowered);

}  // namespace kiln::inductor
