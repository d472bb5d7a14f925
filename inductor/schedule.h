// The CPU inductor's fusion scheduler: which prim nodes become one kernel
// (Note [Kernel scheduling] in schedule.cpp).
#pragma once

#include <vector>

#include "inductor/lower_group.h"
#include "prims/extern_writes.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// The kernel groups of `graph`, each lowerable by lower_group, in graph
// order of their last node. Nodes in no group stay for the prim executor.
std::vector<KernelGroup> schedule_kernels(const prims::PrimGraph& graph);

}  // namespace kiln::inductor
