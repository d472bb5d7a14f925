// Conversions moved above the reshapes they read, so they fuse with the
// kernel that makes the reshaped value. See Note [Casts above reshapes] in
// sink_views.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each convert_element_type of a dim-merging or -splitting
// reshape of a contiguous computed value rewritten as the reshape of the
// converted value; false (and *out untouched) when none qualifies. Same
// inputs and outputs, in order, with the same metas.
bool sink_reshapes_below_casts(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
