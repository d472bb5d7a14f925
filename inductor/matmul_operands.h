// Matmul operands copied by kiln's kernels rather than by torch, for CUDA
// graphs. See Note [Matmul operand copies] in matmul_operands.cpp.
#pragma once

#include "graph/tensor_meta.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// True when torch.matmul(a, b) on CUDA copies operand `x` (one of a, b;
// `other` is the other one) before calling cuBLAS: its batch dims do not
// merge into one stride, or its matrix has no unit-stride dim.
bool matmul_copies_operand(const graph::TensorMeta& x, const graph::TensorMeta& other);

// `graph` with each matmul operand that torch would copy replaced by a
// clone in a layout cuBLAS takes as it is; false (and *out untouched) when
// no operand needs one. Same inputs and outputs, in order.
bool copy_matmul_operands(const prims::PrimGraph& graph, prims::PrimGraph* out);

}  // namespace kiln::inductor
