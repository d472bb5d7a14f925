// What the tests of prim graph rewrites share (split_outer_reductions,
// kernel_copies, recompute_outputs): tensor metadata, prim counts, and the
// graph before and after a rewrite run on the same inputs.
#pragma once

#include <string>
#include <vector>

#include "graph/tensor_meta.h"
#include "prims/prim_graph.h"

namespace kiln::test {

// Metadata of a CPU tensor: `strides`, or contiguous ones when empty.
graph::TensorMeta tensor_meta(std::vector<int64_t> sizes, graph::DType dtype = graph::DType::Float32,
                              std::vector<int64_t> strides = {});

// The nodes of `graph` computing `prim`.
int count_prims(const prims::PrimGraph& graph, prims::Prim prim);

// Runs `before` and `after` (PrimExecutor, CPU tensors) on the tensors the
// Python expressions `inputs` evaluate to, and expects outputs of the same
// metadata, equal bit for bit (`exact`) or allclose (rtol 1e-5, atol 1e-4:
// sums associated differently).
void expect_same_results(const prims::PrimGraph& before, const prims::PrimGraph& after,
                         const std::vector<std::string>& inputs, bool exact = true);

}  // namespace kiln::test
