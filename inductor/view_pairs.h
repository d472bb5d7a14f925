// A view of a view folded into one view of the first one's input, or into
// that input where the two undo each other. See Note [View pairs] in
// view_pairs.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each permute of a permute, and each reshape or view of a
// reshape or view that is itself a view, reading the first one's input
// (with the same result layout), and readers of a pair that gives that
// input back reading the input itself; false (and *out untouched) when
// there is no such pair. The first view is left to drop_dead_nodes where
// nothing else reads it. Same inputs and outputs, in order, with the same
// metas.
bool fold_view_pairs(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
