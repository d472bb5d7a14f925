// Convolution biases added by kiln's kernels on the GPU: a convolution's
// bias becomes an add its reader's kernel fuses. See Note [Convolution
// biases in kernels] in conv_bias.cpp.
#pragma once

#include "prims/prim_graph.h"

namespace kiln::inductor {

// `graph` with each convolution (F.conv1d/2d/3d extern) that has a bias and
// a reader kiln's kernels run called without it, followed by an add of the
// bias viewed along the channels; false (and *out untouched) when none
// qualifies. Same inputs and outputs, in order.
bool move_conv_biases_into_kernels(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
