// Derivative rules of the reductions.
#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"
#include "prims/common_meta.h"

namespace kiln::autograd {

using prims::Prim;

namespace {

// d prod / dx_i is the product of the other elements of x_i's slice. Without
// a zero in the slice that is y / x_i (torch's formula); with exactly one
// zero it is the product of the nonzero elements at the zero and 0
// elsewhere; with two or more zeros it is 0 everywhere. Nothing divides by
// zero, so the gradient is exact for any set of dims.
int prod_grad(prims::PrimBuilder& b, int x, int y, int g, const prims::PrimAttrs& attrs) {
  const graph::TensorMeta ym = b.meta(y);  // copies: appending nodes moves the values
  const std::vector<int64_t> sizes = b.meta(x).sizes;
  x = cast_to(b, x, ym.dtype);  // prod(dtype=) computes in the result's dtype
  auto spread = [&](int r) { return expand_reduced(b, r, attrs.dims, attrs.keepdim, sizes); };
  auto mul = [&](int p, int q) { return b.binary(Prim::Mul, v(p), v(q)); };
  const int zero = b.binary(Prim::Eq, v(x), f(0));
  const int zeros = b.expand(b.reduce(Prim::Sum, b.convert(zero, ym.dtype), attrs.dims, true), sizes);
  const int nonzero_prod =
      b.expand(b.reduce(Prim::Prod, b.where(zero, f(1), v(x)), attrs.dims, true), sizes);
  const int no_zero = b.binary(Prim::Eq, v(zeros), f(0));
  const int lone_zero = b.binary(Prim::LogicalAnd, v(zero), v(b.binary(Prim::Eq, v(zeros), f(1))));
  const int others = b.where(no_zero, v(b.binary(Prim::Div, v(spread(y)), v(x))),
                             v(b.where(lone_zero, v(nonzero_prod), f(0))));
  return mul(spread(g), others);
}

}  // namespace

std::vector<int> vjp_reduction(prims::PrimBuilder& b, const NodeView& view,
                               const std::vector<int>& grads, const std::vector<bool>& needs) {
  const prims::PrimNode& node = view.node;
  const prims::PrimAttrs& attrs = node.attrs;
  const int x = view.inputs[0];
  const graph::TensorMeta xm = b.meta(x);  // a copy: appending nodes moves the values
  std::vector<int> out(1, -1);
  if (!needs[0]) return out;
  switch (node.prim) {
    case Prim::Sum:
      out[0] = cast_to(b, expand_reduced(b, grads[0], attrs.dims, attrs.keepdim, xm.sizes), xm.dtype);
      return out;
    case Prim::Prod:
      out[0] = cast_to(b, prod_grad(b, x, view.outputs[0], grads[0], attrs), xm.dtype);
      return out;
    case Prim::Amax:
    case Prim::Amin: {
      // Shared evenly among the elements equal to the extreme, as torch does:
      // (g / count) * mask, a product, so a NaN gradient reaches every
      // element as in eager (a select would give the others 0).
      const int y = expand_reduced(b, view.outputs[0], attrs.dims, attrs.keepdim, xm.sizes);
      const int mask = b.convert(b.binary(Prim::Eq, v(x), v(y)), xm.dtype);
      std::vector<int64_t> dims = attrs.dims;
      const int count = b.reduce(Prim::Sum, mask, dims, true);
      const int g = expand_reduced(b, grads[0], attrs.dims, attrs.keepdim, xm.sizes);
      const int share = b.binary(Prim::Div, v(g), v(b.expand(count, xm.sizes)));
      out[0] = b.binary(Prim::Mul, v(share), v(mask));
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
