// A copy of permutes of a copy, where permuting the first copy's input
// already lays the result out as the second copy does, is that permuted
// input. See Note [Copies undone by permutes] in redundant_copies.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each clone of permute(s) of a clone of x (each read once)
// replaced by the permutes of x itself where
// those have the second clone's sizes and strides, no graph output views
// the result and no extern may write x or the result; false (and *out
// untouched) when there is none. Same inputs and outputs, in order.
bool drop_copies_undone_by_permutes(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
