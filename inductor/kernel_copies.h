// Copies torch would make inside a graph's ops (reshapes that cannot view;
// on CUDA, matmul operands it cannot hand cuBLAS) made explicit, so kiln's
// kernels make them. See Note [Kernel copies] in kernel_copies.cpp.
#pragma once

#include "graph/tensor_meta.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// True when torch.matmul(a, b) on CUDA copies operand `x` (one of a, b;
// `other` is the other one) before calling cuBLAS: its batch dims do not
// merge into one stride, or its matrix has no unit-stride dim.
bool matmul_copies_operand(const graph::TensorMeta& x, const graph::TensorMeta& other);

// `graph` with each reshape that would copy replaced by a contiguous clone
// and a view of it, and with `matmul_operands` (CUDA graphs) each matmul
// operand that torch would copy by a clone in a layout cuBLAS takes as it
// is; false (and *out untouched) when there is neither. Same inputs and
// outputs, in order.
bool make_copies_explicit(const prims::PrimGraph& graph, bool matmul_operands, prims::PrimGraph* out);

}  // namespace kiln::inductor
