// Casts of a graph's input tensors (autocast's weight casts) batched into
// one foreach copy per dtype pair. See Note [Batched weight casts] in
// batched_casts.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with its convert_element_type nodes of contiguous graph inputs
// that no extern may write, whose results only matmuls, extern calls and
// graph outputs read (directly or through views), replaced, per pair of
// source and target dtype with at least two of them, by one call of
// kiln._batched_casts.cast_all where the first of them was. False (and
// *out untouched) when no pair has two.
bool batch_input_casts(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
