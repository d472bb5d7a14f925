// The CPU inductor's fusion scheduler: which prim nodes become one kernel
// (Note [Kernel scheduling] in schedule.cpp).
#pragma once

#include <utility>
#include <vector>

#include "inductor/lower_group.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// The kernel groups of `graph`, each lowerable by lower_group, in graph
// order of their last node. Nodes in no group stay for the prim executor.
std::vector<KernelGroup> schedule_kernels(const prims::PrimGraph& graph);

// The values a node reads: its tensor arguments and, for an extern, the
// values in its torch call's arguments.
std::vector<int> node_reads(const prims::PrimNode& node);

// Orderings beyond the data edges (Note [Extern writes] in schedule.cpp):
// (before, after) node pairs that must run in that order because an extern
// call may write a tensor both read.
std::vector<std::pair<int, int>> extern_order_edges(const prims::PrimGraph& graph);

}  // namespace kiln::inductor
