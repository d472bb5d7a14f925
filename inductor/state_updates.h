// In-place updates of a graph's input tensors (batch norm's running
// statistics and counters) batched into one foreach call each. See Note
// [Batched state updates] in state_updates.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with its `Tensor.copy_(input, value)` externs (value read by
// nothing else, the same sizes and dtype) and its `Tensor.add_(input, n)`
// externs (the same n) each replaced by one torch._foreach_copy_ or
// torch._foreach_add_ call where the last of them ran, when at least two
// qualify: each writes a graph input nothing reads after it, and its
// result is unread. False (and *out untouched) when there are none to batch.
bool batch_state_updates(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
