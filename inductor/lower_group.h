// Lowering a fusion group that may reduce and may have several results:
// the kernel's iteration space and reduced dims, each result's place in
// it, and the loop order (Note [Loop order]). The scheduler (schedule.h)
// decides the groups.
#pragma once

#include <vector>

#include "inductor/lower_values.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// Prim nodes computed by one kernel, and the values it hands to the rest
// of the graph.
struct KernelGroup {
  std::vector<int> nodes;    // ascending
  std::vector<int> outputs;  // values used outside the group, or graph outputs
};

// The kernel computing `group`'s outputs: its reductions (which must all
// reduce the same dims of the same shape) over the group's iteration space,
// every output either of the space's shape or of the reductions' result
// shape. Throws LoweringError.
LoweredKernel lower_group(const prims::PrimGraph& graph, const KernelGroup& group);

}  // namespace kiln::inductor
