// Derivative rules of the reductions.
#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"
#include "prims/common_meta.h"

namespace kiln::autograd {

using prims::Prim;

std::vector<int> vjp_reduction(prims::PrimBuilder& b, const NodeView& view,
                               const std::vector<int>& grads, const std::vector<bool>& needs) {
  const prims::PrimNode& node = view.node;
  const prims::PrimAttrs& attrs = node.attrs;
  const int x = view.inputs[0];
  const graph::TensorMeta& xm = b.meta(x);
  std::vector<int> out(1, -1);
  if (!needs[0]) return out;
  switch (node.prim) {
    case Prim::Sum:
      out[0] = cast_to(b, expand_reduced(b, grads[0], attrs.dims, attrs.keepdim, xm.sizes), xm.dtype);
      return out;
    case Prim::Amax:
    case Prim::Amin: {
      // Shared evenly among the elements equal to the extreme, as torch does.
      const int y = expand_reduced(b, view.outputs[0], attrs.dims, attrs.keepdim, xm.sizes);
      const int hit = b.binary(Prim::Eq, v(x), v(y));
      std::vector<int64_t> dims = attrs.dims;
      const int count = b.reduce(Prim::Sum, b.convert(hit, xm.dtype), dims, true);
      const int g = expand_reduced(b, grads[0], attrs.dims, attrs.keepdim, xm.sizes);
      const int share = b.binary(Prim::Div, v(g), v(b.expand(count, xm.sizes)));
      out[0] = b.where(hit, v(share), f(0));
      return out;
    }
    case Prim::VarMean: {
      // var = sum((x - mean)^2) / (n - correction); mean = sum(x) / n.
      int64_t n = 1;
      if (attrs.dims.empty()) {
        n = prims::numel(xm.sizes);
      } else {
        for (int64_t d : attrs.dims) n *= xm.sizes[d];
      }
      int total = -1;
      if (grads[0] >= 0) {
        const int mean = expand_reduced(b, view.outputs[1], attrs.dims, attrs.keepdim, xm.sizes);
        const int centered = b.binary(Prim::Sub, v(x), v(mean));
        const int g = expand_reduced(b, grads[0], attrs.dims, attrs.keepdim, xm.sizes);
        const double scale = 2.0 / (static_cast<double>(n) - attrs.correction);
        total = b.binary(Prim::Mul, v(b.binary(Prim::Mul, v(g), v(centered))), f(scale));
      }
      if (grads[1] >= 0) {
        const int g = expand_reduced(b, grads[1], attrs.dims, attrs.keepdim, xm.sizes);
        const int share = b.binary(Prim::Div, v(g), f(static_cast<double>(n)));
        total = total < 0 ? share : b.binary(Prim::Add, v(total), v(share));
      }
      out[0] = cast_to(b, total, xm.dtype);
      return out;
    }
    default:
      throw NoDerivative(std::string(prims::prim_name(node.prim)) + " has no derivative rule");
  }
}

}  // namespace kiln::autograd
