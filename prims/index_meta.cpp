#include "prims/index_meta.h"

#include <algorithm>
#include <string>

#include "prims/broadcast.h"
#include "prims/common_meta.h"
#include "prims/layout.h"
#include "prims/pointwise_meta.h"
#include "prims/prim_error.h"

namespace kiln::prims {
namespace {

using graph::DType;

// Sizes as torch's ensure_nonempty helpers see them: a 0-dim tensor counts as [1].
int64_t rank_of(const graph::TensorMeta& t) { return std::max<int64_t>(t.sizes.size(), 1); }
int64_t size_at(const graph::TensorMeta& t, int64_t d) { return t.sizes.empty() ? 1 : t.sizes[d]; }

void check_long_index(const char* op, const graph::TensorMeta& index) {
  if (index.dtype != DType::Int64) {
    fail(op, std::string("expected dtype int64 for index, got ") + graph::dtype_name(index.dtype));
  }
}

graph::TensorMeta fresh(const graph::TensorMeta& like, std::vector<int64_t> sizes) {
  graph::TensorMeta out = like;
  out.strides = graph::contiguous_strides(sizes);
  out.sizes = std::move(sizes);
  return out;
}

}  // namespace

graph::TensorMeta gather_meta(const graph::TensorMeta& a, int64_t dim,
                              const graph::TensorMeta& index) {
  const int64_t d = wrap_dim("gather", dim, static_cast<int64_t>(a.sizes.size()));
  graph::TensorMeta out = fresh(a, index.sizes);
  same_device("gather", {&a, &index}, &out);
  // torch skips every check for an empty index.
  if (numel(index.sizes) != 0) {
    check_long_index("gather", index);
    if (rank_of(index) != rank_of(a)) {
      fail("gather", "index tensor must have the same number of dimensions as input tensor");
    }
    for (int64_t i = 0; i < rank_of(a); ++i) {
      if (i != d && size_at(index, i) > size_at(a, i)) {
        fail("gather", "size does not match at dimension " + std::to_string(i) +
                           ": expected index " + format_shape(index.sizes) +
                           " to be no larger than input " + format_shape(a.sizes) +
                           " apart from dimension " + std::to_string(d));
      }
    }
  }
  out.requires_grad = result_requires_grad({&a}, out.dtype);
  return out;
}

graph::TensorMeta scatter_meta(const graph::TensorMeta& a, int64_t dim,
                               const graph::TensorMeta& index, const graph::TensorMeta* src) {
  const int64_t d = wrap_dim("scatter", dim, static_cast<int64_t>(a.sizes.size()));
  graph::TensorMeta out = fresh(a, a.sizes);
  std::vector<const graph::TensorMeta*> tensors = {&a, &index};
  if (src != nullptr) tensors.push_back(src);
  same_device("scatter", tensors, &out);
  if (src != nullptr && src->dtype != a.dtype) {
    fail("scatter", std::string("expected src dtype ") + graph::dtype_name(src->dtype) +
                        " to equal self dtype " + graph::dtype_name(a.dtype));
  }
  if (numel(index.sizes) != 0) {
    check_long_index("scatter", index);
    if (rank_of(index) != rank_of(a) || (src != nullptr && rank_of(*src) != rank_of(a))) {
      fail("scatter", "index and src must have the same number of dimensions as self");
    }
    for (int64_t i = 0; i < rank_of(a); ++i) {
      const bool too_big_for_self = i != d && size_at(index, i) > size_at(a, i);
      const bool too_big_for_src = src != nullptr && size_at(index, i) > size_at(*src, i);
      if (too_big_for_self || too_big_for_src) {
        fail("scatter", "expected index " + format_shape(index.sizes) +
                            " to be no larger than self " + format_shape(a.sizes) +
                            " apart from dimension " + std::to_string(d) +
                            (src != nullptr ? " and no larger than src " + format_shape(src->sizes)
                                            : std::string()));
      }
    }
  }
  std::vector<const graph::TensorMeta*> grad_inputs = {&a};
  if (src != nullptr) grad_inputs.push_back(src);
  out.requires_grad = result_requires_grad(grad_inputs, out.dtype);
  return out;
}

graph::TensorMeta index_select_meta(const graph::TensorMeta& a, int64_t dim,
                                    const graph::TensorMeta& index) {
  const int64_t d = wrap_dim("index_select", dim, static_cast<int64_t>(a.sizes.size()));
  if (index.sizes.size() > 1) fail("index_select", "index is supposed to be a vector");
  if (index.dtype != DType::Int64 && index.dtype != DType::Int32) {
    fail("index_select", std::string("expected dtype int32 or int64 for index, got ") +
                             graph::dtype_name(index.dtype));
  }
  const int64_t count = numel(index.sizes);
  std::vector<int64_t> sizes = a.sizes;
  if (sizes.empty()) {
    // torch 1.13 ignored extra indices into a 0-dim tensor; 2.x rejects them.
    if (count != 1) fail("index_select", "index to a 0-dim tensor must have exactly 1 value");
  } else {
    sizes[d] = count;
  }
  graph::TensorMeta out = fresh(a, std::move(sizes));
  same_device("index_select", {&a, &index}, &out);
  out.requires_grad = result_requires_grad({&a}, out.dtype);
  return out;
}

std::vector<int64_t> indexed_shape(const char* op, const graph::TensorMeta& a,
                                   const std::vector<std::optional<graph::TensorMeta>>& indices) {
  const size_t ndim = a.sizes.size();
  if (indices.size() > ndim) {
    fail(op, "too many indices for tensor of dimension " + std::to_string(ndim) + " (got " +
                 std::to_string(indices.size()) + ")");
  }
  std::vector<std::vector<int64_t>> index_shapes;
  std::vector<size_t> positions;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (!indices[i]) continue;
    check_long_index(op, *indices[i]);
    index_shapes.push_back(indices[i]->sizes);
    positions.push_back(i);
  }
  if (positions.empty()) fail(op, "expected at least one index tensor");
  std::vector<int64_t> index_shape;
  for (const auto& shape : index_shapes) {
    std::optional<std::vector<int64_t>> joined = try_broadcast_shapes(index_shape, shape);
    if (joined) {
      index_shape = std::move(*joined);
    } else {
      std::string all;
      for (const auto& s : index_shapes) all += (all.empty() ? "" : ", ") + format_shape(s);
      fail(op, "shape mismatch: indexing tensors could not be broadcast together with shapes " + all);
    }
  }
  const bool adjacent = positions.back() - positions.front() + 1 == positions.size();
  std::vector<int64_t> out;
  if (adjacent) {
    out.assign(a.sizes.begin(), a.sizes.begin() + positions.front());
    out.insert(out.end(), index_shape.begin(), index_shape.end());
    out.insert(out.end(), a.sizes.begin() + positions.back() + 1, a.sizes.end());
  } else {
    out = index_shape;
    for (size_t d = 0; d < ndim; ++d) {
      if (d >= indices.size() || !indices[d]) out.push_back(a.sizes[d]);
    }
  }
  return out;
}

graph::TensorMeta index_put_meta(const graph::TensorMeta& a,
                                 const std::vector<std::optional<graph::TensorMeta>>& indices,
                                 const graph::TensorMeta& values) {
  const std::vector<int64_t> target = indexed_shape("index_put", a, indices);
  if (values.dtype != a.dtype) {
    fail("index_put", std::string("values dtype ") + graph::dtype_name(values.dtype) +
                          " does not match the destination's " + graph::dtype_name(a.dtype));
  }
  if (!broadcasts_to(values.sizes, target)) {
    fail("index_put", "shape mismatch: value tensor of shape " + format_shape(values.sizes) +
                          " cannot be broadcast to indexing result of shape " +
                          format_shape(target));
  }
  graph::TensorMeta out = clone_meta(a);
  same_device("index_put", {&a, &values}, &out);
  out.requires_grad = result_requires_grad({&a, &values}, out.dtype);
  return out;
}

}  // namespace kiln::prims
