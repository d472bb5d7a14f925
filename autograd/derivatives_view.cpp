// Derivative rules of the views, clone and cat.
#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"

namespace kiln::autograd {

using prims::Prim;

std::vector<int> vjp_view(prims::PrimBuilder& b, const NodeView& view,
                          const std::vector<int>& grads, const std::vector<bool>& needs) {
  const prims::PrimNode& node = view.node;
  const prims::PrimAttrs& attrs = node.attrs;
  const int g = grads[0];
  std::vector<int> out(view.inputs.size(), -1);
  if (node.prim == Prim::Cat) {
    // Each input's gradient is its slice of g.
    int64_t offset = 0;
    for (size_t i = 0; i < view.inputs.size(); ++i) {
      const graph::TensorMeta& m = b.meta(view.inputs[i]);
      const int64_t size = m.sizes.empty() ? 0 : m.sizes[attrs.dim];
      if (needs[i]) out[i] = b.slice(g, attrs.dim, offset, offset + size);
      offset += size;
    }
    return out;
  }
  if (!needs[0]) return out;
  const graph::TensorMeta& xm = b.meta(view.inputs[0]);
  switch (node.prim) {
    case Prim::Clone:
      out[0] = g;
      return out;
    case Prim::View:
    case Prim::Reshape:
    case Prim::Squeeze:
    case Prim::Unsqueeze:
      out[0] = b.reshape(g, xm.sizes);
      return out;
    case Prim::Expand:
      out[0] = sum_to(b, g, xm);
      return out;
    case Prim::Permute: {
      std::vector<int64_t> inverse(attrs.dims.size());
      for (size_t i = 0; i < attrs.dims.size(); ++i) inverse[attrs.dims[i]] = static_cast<int64_t>(i);
      out[0] = b.permute(g, inverse);
      return out;
    }
    default:
      throw NoDerivative(std::string(prims::prim_name(node.prim)) + " has no derivative rule");
  }
}

}  // namespace kiln::autograd
