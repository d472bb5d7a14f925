#include "autograd/grad_helpers.h"

#include <algorithm>

namespace kiln::autograd {

using prims::Prim;

int cast_to(prims::PrimBuilder& b, int g, graph::DType dtype) {
  return b.meta(g).dtype == dtype ? g : b.convert(g, dtype);
}

int sum_to(prims::PrimBuilder& b, int g, graph::TensorMeta target) {
  const std::vector<int64_t> from = b.meta(g).sizes;
  const std::vector<int64_t>& to = target.sizes;
  const int64_t lead = static_cast<int64_t>(from.size()) - static_cast<int64_t>(to.size());
  if (lead > 0) {
    std::vector<int64_t> dims(lead);
    for (int64_t d = 0; d < lead; ++d) dims[d] = d;
    g = b.reduce(Prim::Sum, g, dims, false);
  }
  std::vector<int64_t> ones;
  for (size_t d = 0; d < to.size(); ++d) {
    if (to[d] == 1 && b.meta(g).sizes[d] != 1) ones.push_back(static_cast<int64_t>(d));
  }
  if (!ones.empty()) g = b.reduce(Prim::Sum, g, ones, true);
  return cast_to(b, g, target.dtype);
}

int expand_reduced(prims::PrimBuilder& b, int g, const std::vector<int64_t>& dims, bool keepdim,
                   std::vector<int64_t> sizes) {
  if (!keepdim) {
    // Reducing over no dims reduces over all of them.
    std::vector<int64_t> reduced = dims;
    if (reduced.empty()) {
      for (size_t d = 0; d < sizes.size(); ++d) reduced.push_back(static_cast<int64_t>(d));
    }
    std::sort(reduced.begin(), reduced.end());
    std::vector<int64_t> kept = sizes;
    for (int64_t d : reduced) kept[d] = 1;
    g = b.reshape(g, kept);
  }
  return b.expand(g, sizes);
}

}  // namespace kiln::autograd

#include "prims/factory_meta.h"

namespace kiln::autograd {

int zeros_like(prims::PrimBuilder& b, graph::TensorMeta like) {
  prims::PrimAttrs attrs;
  attrs.sizes = like.sizes;
  attrs.value = prims::Scalar::of_float(0);
  attrs.dtype = like.dtype;
  attrs.device_type = like.device_type;
  attrs.device_index = like.device_index;
  prims::Placement where{like.device_type, like.device_index, false};
  graph::TensorMeta meta = prims::full_meta(like.sizes, prims::ScalarKind::Float, like.dtype, where);
  return b.graph().add_node1(Prim::Full, {}, std::move(attrs), meta);
}

}  // namespace kiln::autograd
