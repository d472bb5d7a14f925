// Meta rule of matmul, kiln's batched matrix product: both operands have at
// least 2 dims, the leading (batch) dims broadcast, the result is contiguous.
// Vector operands (torch.matmul's 1-dim cases) are unsqueezed and squeezed
// around it by the decompositions.
#pragma once

#include "graph/tensor_meta.h"

namespace kiln::prims {

// matmul(a, b): [batch..., n, k] @ [batch..., k, m] -> [batch..., n, m].
// Throws PrimError for rank < 2, different dtypes, bool, mismatched inner
// sizes, or batch dims that do not broadcast.
graph::TensorMeta matmul_meta(const graph::TensorMeta& a, const graph::TensorMeta& b);

}  // namespace kiln::prims
