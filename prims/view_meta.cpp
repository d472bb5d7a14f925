#include "prims/view_meta.h"

#include <algorithm>
#include <string>

#include "prims/common_meta.h"
#include "prims/prim_error.h"

namespace kiln::prims {
namespace {

graph::TensorMeta with_geometry(const graph::TensorMeta& a, std::vector<int64_t> sizes,
                                std::vector<int64_t> strides) {
  graph::TensorMeta out = a;
  out.sizes = std::move(sizes);
  out.strides = std::move(strides);
  return out;
}

}  // namespace

std::vector<int64_t> infer_sizes(const char* op, const std::vector<int64_t>& sizes, int64_t numel) {
  std::vector<int64_t> out = sizes;
  int64_t known = 1;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (inferred) fail(op, "only one dimension can be inferred");
      inferred = i;
    } else if (sizes[i] >= 0) {
      known *= sizes[i];
    } else {
      fail(op, "invalid shape dimension " + std::to_string(sizes[i]));
    }
  }
  const bool fits = numel == known || (inferred && known > 0 && numel % known == 0);
  if (!fits) {
    fail(op, "shape '" + format_shape(sizes) + "' is invalid for input of size " +
                 std::to_string(numel));
  }
  if (inferred) {
    if (known == 0) {
      fail(op, "cannot reshape tensor of 0 elements into shape " + format_shape(sizes) +
                   " because the unspecified dimension size -1 can be any value");
    }
    out[*inferred] = numel / known;
  }
  return out;
}

// Note [View strides]
// A view regroups the input's dims: walking both shapes from the right, the
// input splits into chunks of dims that are contiguous with each other
// (stride[d-1] == size[d] * stride[d], size-1 dims ignored); each chunk must
// be covered exactly by a run of new dims, which get strides within the
// chunk. A 0-dim input views as all-1 strides; a size-0 input keeps its
// strides for the same shape and otherwise takes contiguous ones.
std::optional<std::vector<int64_t>> view_strides(const graph::TensorMeta& a,
                                                 const std::vector<int64_t>& sizes) {
  const std::vector<int64_t>& old_sizes = a.sizes;
  const std::vector<int64_t>& old_strides = a.strides;
  if (old_sizes.empty()) return std::vector<int64_t>(sizes.size(), 1);
  if (numel(old_sizes) == 0) {
    if (old_sizes == sizes) return old_strides;
    return graph::contiguous_strides(sizes);
  }
  std::vector<int64_t> strides(sizes.size());
  int64_t view_d = static_cast<int64_t>(sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    const bool chunk_ends =
        tensor_d == 0 || (old_sizes[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

ViewMeta view_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> resolved = infer_sizes("view", sizes, numel(a.sizes));
  std::optional<std::vector<int64_t>> strides = view_strides(a, resolved);
  if (!strides) {
    fail("view", "size " + format_shape(resolved) + " is not compatible with the input's size " +
                     format_shape(a.sizes) + " and stride " + format_shape(a.strides) +
                     " (a dimension spans two non-contiguous subspaces); use reshape instead");
  }
  return {with_geometry(a, resolved, std::move(*strides)), 0};
}

ReshapeMeta reshape_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> resolved = infer_sizes("reshape", sizes, numel(a.sizes));
  std::optional<std::vector<int64_t>> strides = view_strides(a, resolved);
  if (strides) return {with_geometry(a, resolved, std::move(*strides)), true};
  return {with_geometry(a, resolved, graph::contiguous_strides(resolved)), false};
}

ViewMeta expand_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  const int64_t tensor_dim = static_cast<int64_t>(a.sizes.size());
  if (ndim < tensor_dim) {
    fail("expand", "the number of sizes provided (" + std::to_string(ndim) +
                       ") must be greater or equal to the number of dimensions in the tensor (" +
                       std::to_string(tensor_dim) + ")");
  }
  std::vector<int64_t> out_sizes(ndim), out_strides(ndim);
  for (int64_t i = ndim - 1; i >= 0; --i) {
    const int64_t dim = tensor_dim - (ndim - i);
    int64_t size = dim >= 0 ? a.sizes[dim] : 1;
    // A new leading dim of size 1 gets the stride a contiguous dim there
    // would have; a 0-dim input expands with all strides 0.
    int64_t stride = dim >= 0           ? a.strides[dim]
                     : tensor_dim == 0 ? 0
                     : out_sizes[i + 1] * out_strides[i + 1];
    int64_t target = sizes[i];
    if (target == -1) {
      if (dim < 0) {
        fail("expand", "the expanded size -1 isn't allowed in a leading, non-existing dimension " +
                           std::to_string(i));
      }
      target = size;
    }
    if (target < 0) fail("expand", "invalid size " + std::to_string(target));
    if (size != target) {
      if (size != 1) {
        fail("expand", "the expanded size of the tensor (" + std::to_string(target) +
                           ") must match the existing size (" + std::to_string(size) +
                           ") at non-singleton dimension " + std::to_string(i) +
                           ". Target sizes: " + format_shape(sizes) +
                           ". Tensor sizes: " + format_shape(a.sizes));
      }
      size = target;
      stride = 0;
    }
    out_sizes[i] = size;
    out_strides[i] = stride;
  }
  return {with_geometry(a, std::move(out_sizes), std::move(out_strides)), 0};
}

ViewMeta permute_meta(const graph::TensorMeta& a, const std::vector<int64_t>& dims) {
  const int64_t ndim = static_cast<int64_t>(a.sizes.size());
  if (static_cast<int64_t>(dims.size()) != ndim) {
    fail("permute", "number of dims " + std::to_string(dims.size()) +
                        " does not match the tensor's rank " + std::to_string(ndim));
  }
  const std::vector<int64_t> wrapped = wrap_dims("permute", dims, ndim);
  std::vector<int64_t> sizes(ndim), strides(ndim);
  for (int64_t i = 0; i < ndim; ++i) {
    sizes[i] = a.sizes[wrapped[i]];
    strides[i] = a.strides[wrapped[i]];
  }
  return {with_geometry(a, std::move(sizes), std::move(strides)), 0};
}

ViewMeta slice_meta(const graph::TensorMeta& a, int64_t dim, std::optional<int64_t> start,
                    std::optional<int64_t> end, int64_t step) {
  if (a.sizes.empty()) fail("slice", "cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim("slice", dim, static_cast<int64_t>(a.sizes.size()));
  if (step <= 0) fail("slice", "step must be positive, got " + std::to_string(step));
  const int64_t size = a.sizes[d];
  // Python's clamping: negative bounds count from the end, then clip to [0, size].
  int64_t lo = start.value_or(0), hi = end.value_or(size);
  if (lo < 0) lo += size;
  if (hi < 0) hi += size;
  lo = std::clamp<int64_t>(lo, 0, size);
  hi = std::clamp<int64_t>(hi, lo, size);
  ViewMeta out{a, lo * a.strides[d]};
  out.meta.sizes[d] = (hi - lo + step - 1) / step;
  out.meta.strides[d] = a.strides[d] * step;
  return out;
}

ViewMeta squeeze_meta(const graph::TensorMeta& a, const std::vector<int64_t>& dims) {
  const int64_t ndim = static_cast<int64_t>(a.sizes.size());
  std::vector<bool> drop(ndim, dims.empty());
  for (int64_t d : wrap_dims("squeeze", dims, ndim)) {
    if (d < ndim) drop[d] = true;
  }
  graph::TensorMeta out = with_geometry(a, {}, {});
  for (int64_t d = 0; d < ndim; ++d) {
    if (drop[d] && a.sizes[d] == 1) continue;
    out.sizes.push_back(a.sizes[d]);
    out.strides.push_back(a.strides[d]);
  }
  return {std::move(out), 0};
}

ViewMeta unsqueeze_meta(const graph::TensorMeta& a, int64_t dim) {
  const int64_t ndim = static_cast<int64_t>(a.sizes.size());
  const int64_t d = wrap_dim("unsqueeze", dim, ndim + 1);
  const int64_t stride = d >= ndim ? 1 : a.sizes[d] * a.strides[d];
  ViewMeta out{a, 0};
  out.meta.sizes.insert(out.meta.sizes.begin() + d, 1);
  out.meta.strides.insert(out.meta.strides.begin() + d, stride);
  return out;
}

graph::TensorMeta as_strided_meta(const graph::TensorMeta& a, const std::vector<int64_t>& sizes,
                                  const std::vector<int64_t>& strides, int64_t storage_offset) {
  if (sizes.size() != strides.size()) {
    fail("as_strided", "mismatch in length of strides " + format_shape(strides) + " and shape " +
                           format_shape(sizes));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) fail("as_strided", "negative size in " + format_shape(sizes));
    if (strides[i] < 0) fail("as_strided", "negative strides are not supported, got " + format_shape(strides));
  }
  if (storage_offset < 0) fail("as_strided", "negative storage offset " + std::to_string(storage_offset));
  return with_geometry(a, sizes, strides);
}

}  // namespace kiln::prims
