// Meta rules of the indexing prims: gather, scatter, index_select and
// index_put. kiln takes int64 index tensors for gather, scatter and
// index_put (torch 1.13 requires them; torch 2.x also accepts int32) and
// int32 or int64 for index_select; bool masks are not prims, because their
// result shapes depend on the data.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::prims {

// gather(a, dim, index): index's shape, a's dtype, contiguous. Throws
// PrimError for a non-int64 index, a rank mismatch, or an index larger than
// a outside `dim`.
graph::TensorMeta gather_meta(const graph::TensorMeta& a, int64_t dim,
                              const graph::TensorMeta& index);

// scatter(a, dim, index, src) and its add-reducing form: a's shape and
// dtype, contiguous. `src` is a tensor of a's dtype, or nullptr for a
// Python scalar value.
graph::TensorMeta scatter_meta(const graph::TensorMeta& a, int64_t dim,
                               const graph::TensorMeta& index, const graph::TensorMeta* src);

// index_select(a, dim, index): a's shape with dim replaced by index's length, contiguous.
graph::TensorMeta index_select_meta(const graph::TensorMeta& a, int64_t dim,
                                    const graph::TensorMeta& index);

// index_put(a, indices, values, accumulate): a copy of a (layout preserved)
// with values written where the indices point. `indices` has one entry per
// leading dim of a; nullopt entries take the whole dim. Throws PrimError when
// the indices do not broadcast together or values do not broadcast to the
// indexed shape.
graph::TensorMeta index_put_meta(const graph::TensorMeta& a,
                                 const std::vector<std::optional<graph::TensorMeta>>& indices,
                                 const graph::TensorMeta& values);

// The shape a[indices] has (advanced indexing): the broadcast index shape
// replaces the indexed dims in place when they are adjacent, else goes first.
std::vector<int64_t> indexed_shape(const char* op, const graph::TensorMeta& a,
                                   const std::vector<std::optional<graph::TensorMeta>>& indices);

}  // namespace kiln::prims
