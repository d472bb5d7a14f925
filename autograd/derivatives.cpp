#include "autograd/derivatives.h"

#include "autograd/derivatives_family.h"

namespace kiln::autograd {

using prims::Family;
using prims::Prim;

bool is_non_differentiable(Prim prim) {
  switch (prim) {
    case Prim::Argmax:
    case Prim::Argmin:
    case Prim::Iota:
    case Prim::Uniform:
    case Prim::Normal:
    case Prim::Bernoulli:
    case Prim::Full:
      return true;
    default:
      return prims::prim_info(prim).promotion == prims::PromotionKind::AlwaysBool ||
             prims::has_flag(prim, prims::kIntegralOnly);
  }
}

std::vector<int> vjp(prims::PrimBuilder& b, const NodeView& view, const std::vector<int>& grads,
                     const std::vector<bool>& needs) {
  const Prim prim = view.node.prim;
  if (is_non_differentiable(prim)) {
    throw NoDerivative(std::string(prims::prim_name(prim)) + " has no gradient");
  }
  switch (prims::prim_info(prim).family) {
    case Family::Unary:
    case Family::Binary:
    case Family::Ternary:
    case Family::Convert:
      if (prim == Prim::Clone) return vjp_view(b, view, grads, needs);
      return vjp_pointwise(b, view, grads, needs);
    case Family::Reduction:
      return vjp_reduction(b, view, grads, needs);
    case Family::View:
    case Family::Cat:
      return vjp_view(b, view, grads, needs);
    default:
      throw NoDerivative(std::string(prims::prim_name(prim)) + " has no derivative rule yet");
  }
}

}  // namespace kiln::autograd
