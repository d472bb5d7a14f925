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

namespace {

// The rules are written for real values: complex ones would need conjugates
// (torch's convention), so they are refused rather than computed wrongly.
void refuse_complex(const prims::PrimBuilder& b, const NodeView& view) {
  auto check = [&](int id) {
    if (id >= 0 && prims::is_complex(b.meta(id).dtype)) {
      throw NoDerivative(std::string(prims::prim_name(view.node.prim)) +
                         ": complex gradients are not modelled");
    }
  };
  for (int id : view.inputs) check(id);
  for (int id : view.outputs) check(id);
}

}  // namespace

std::vector<int> vjp(prims::PrimBuilder& b, const NodeView& view, const std::vector<int>& grads,
                     const std::vector<bool>& needs) {
  const Prim prim = view.node.prim;
  if (is_non_differentiable(prim)) {
    throw NoDerivative(std::string(prims::prim_name(prim)) + " has no gradient");
  }
  if (prim == Prim::Extern) return vjp_extern(b, view, grads, needs);
  refuse_complex(b, view);
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
    case Family::Matmul:
      return vjp_matmul(b, view, grads, needs);
    case Family::Index:
      return vjp_index(b, view, grads, needs);
    default:
      throw NoDerivative(std::string(prims::prim_name(prim)) + " has no derivative rule");
  }
}

}  // namespace kiln::autograd
