// Two-step reductions for CUDA graphs: a reduction over a long dim with few
// kept points (tall outer reductions; few long rows, x.sum() among them)
// becomes two, so the first one fills the GPU. See Note [Two-step outer
// reductions] in split_outer_reductions.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each sum, amax or amin over a long range of a tensor with
// few kept points (Note [Two-step outer reductions]) rewritten as two
// reductions of the same op;
// false (and *out untouched) when no reduction qualifies. Same inputs and
// outputs, in order.
bool split_outer_reductions(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
