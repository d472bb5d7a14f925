// Linear layers of CUDA graphs as one call: matmul(x, w^T) + bias becomes
// torch's linear, whose cuBLASLt epilogue adds the bias. See Note [Bias
// epilogues] in bias_epilogues.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each add of a bias vector to a matmul's result (the matmul
// read by nothing else) rewritten as an extern call of
// torch.nn.functional.linear; false (and *out untouched) when none
// qualifies. Same inputs and outputs, in order.
bool fold_bias_into_matmuls(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
