// Common subexpressions of prim graphs: a node that repeats an earlier one
// reads the earlier one's results instead (Note [Common nodes]).
#pragma once

#include "prims/prim_graph.h"

namespace kiln::prims {

// `graph` with each pure node that repeats an earlier one (the same prim,
// arguments, parameters and result metadata) or, for a view that changes
// nothing, its input, dropped, its readers reading the earlier results. Same inputs and outputs, in order. False, and
// *out untouched, when no node repeats.
bool merge_common_nodes(const PrimGraph& graph, PrimGraph* out);

}  // namespace kiln::prims
