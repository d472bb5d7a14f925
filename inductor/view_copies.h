// A view read by several kernels made once per kernel, so that each folds
// into its reader's indexing instead of running as a step of its own. See
// Note [A view per kernel reader] in view_copies.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each view (and the views it is a view of) that two or more
// elementwise or reduction nodes read copied before every such reader but
// the first, which reads the copy; other readers keep the original. False
// (and *out untouched) when no view has two such readers. Same inputs and
// outputs, in order.
bool copy_views_per_kernel_reader(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
