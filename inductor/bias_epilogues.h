// Linear layers of CUDA graphs as one call: matmul(x, w^T) + bias becomes
// torch's linear, whose cuBLASLt epilogue adds the bias, and matmul(x, w^T)
// without one torch's linear of w itself. See Notes [Bias epilogues] and
// [Linear without a bias] in bias_epilogues.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each add of a bias vector to a matmul's result (the matmul
// read by nothing else) rewritten as an extern call of
// torch.nn.functional.linear; false (and *out untouched) when none
// qualifies. Same inputs and outputs, in order.
bool fold_bias_into_matmuls(const prims::PrimGraph& graph, prims::PrimGraph* out);

// `graph` with each matmul(x, permute(w, (1, 0))) of a 2-D w rewritten as
// an extern call of torch.nn.functional.linear(x, w) (Note [Linear without
// a bias]); false (and *out untouched) when none qualifies.
bool fold_transposes_into_linear_calls(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
