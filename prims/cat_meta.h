// Meta rule of cat: tensors joined along one dim, promoted to their result
// type, laid out channels-last only when every input suggests it.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::prims {

// cat(tensors, dim). 1-dim size-0 tensors are skipped for shape checks, as
// torch does for legacy reasons. Throws PrimError for an empty list, 0-dim
// inputs, a dim out of range, or sizes that differ outside `dim`.
graph::TensorMeta cat_meta(const std::vector<graph::TensorMeta>& tensors, int64_t dim);

}  // namespace kiln::prims
