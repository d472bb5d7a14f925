// Two-step outer reductions for CUDA graphs: a reduction over a long dim
// with few kept points becomes two, so the first one fills the GPU. See
// Note [Two-step outer reductions] in split_outer_reductions.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each sum, amax or amin over one long, non-innermost dim of
// a tensor with few kept points rewritten as two reductions of the same op;
// false (and *out untouched) when no reduction qualifies. Same inputs and
// outputs, in order.
bool split_outer_reductions(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
