// Meta rules of the view prims: their outputs alias the input's storage, so
// strides are computed exactly as torch's views compute them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::prims {

// A view's metadata and how far its first element moved in the storage.
struct ViewMeta {
  graph::TensorMeta meta;
  int64_t offset = 0;  // added to the base's storage offset (elements)
};

// reshape's result: a view when the strides allow one, else a contiguous copy.
struct ReshapeMeta {
  graph::TensorMeta meta;
  bool is_view = false;
};

// view(a, sizes) with at most one -1. Throws PrimError when the sizes do not
// match a's element count or a's strides cannot be viewed that way.
ViewMeta view_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes);

// reshape(a, sizes): a view when possible, otherwise a contiguous copy (is_view false).
ReshapeMeta reshape_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes);

// expand(a, sizes): size-1 dims and new leading dims broadcast with stride 0;
// -1 keeps a dim's size.
ViewMeta expand_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes);

// permute(a, dims): dims is a permutation of a's dims (negative dims allowed).
ViewMeta permute_meta(const graph::TensorMeta& a, const std::vector<int64_t>& dims);

// slice(a, dim, start, end, step) with Python's clamping of start and end; step > 0.
ViewMeta slice_meta(const graph::TensorMeta& a, int64_t dim, std::optional<int64_t> start,
                    std::optional<int64_t> end, int64_t step = 1);

// squeeze(a, dims): drops the listed dims that have size 1 (all size-1 dims
// when `dims` is empty); listed dims of other sizes stay.
ViewMeta squeeze_meta(const graph::TensorMeta& a, const std::vector<int64_t>& dims = {});

// unsqueeze(a, dim): a new size-1 dim at `dim` (in [-ndim-1, ndim]).
ViewMeta unsqueeze_meta(const graph::TensorMeta& a, int64_t dim);

// as_strided(a, sizes, strides, storage_offset): the given geometry. Storage
// bounds are not checked (metadata does not know the storage's size).
graph::TensorMeta as_strided_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes,
                                  const std::vector<int64_t>& strides, int64_t storage_offset = 0);

// The strides a view to `sizes` would have, or nullopt when a's strides do
// not allow one (torch's computeStride). Sizes must hold a's element count.
std::optional<std::vector<int64_t>> view_strides(const graph::TensorMeta& a,
                                                 const std::vector<int64_t>& sizes);

// Resolves one -1 in `sizes` against `numel` elements; throws PrimError when
// the sizes cannot hold exactly that many.
std::vector<int64_t> infer_sizes(const char* op, const std::vector<int64_t>& sizes, int64_t numel);

}  // namespace kiln::prims
