// Kernel outputs that their one reading kernel recomputes from cheaper
// inputs instead of reading (Note [Recomputed kernel outputs] in
// recompute_outputs.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "inductor/lower_group.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with, for each qualifying output of a group of `groups` (the
// scheduler's, for this graph), the nodes computing it from the group's
// inputs copied for the one other group that reads it; false (and *out
// untouched) when none qualifies. Same inputs and outputs, in order.
bool recompute_kernel_outputs(const prims::PrimGraph& graph, const std::vector<KernelGroup>& groups,
                              prims::PrimGraph* out);

// Bytes that `groups`' outputs store: what a round of recomputing must
// lower to have made progress.
int64_t stored_bytes(const prims::PrimGraph& graph, const std::vector<KernelGroup>& groups);

}  // namespace kiln::inductor
