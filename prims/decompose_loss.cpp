// Decompositions of losses: mse_loss, nll_loss and cross_entropy (class
// indices, with weight, ignore_index and every reduction).
#include "prims/decompositions.h"

namespace kiln::prims {
namespace {

PrimArg v(int id) { return PrimArg::of_value(id); }

void reject_legacy_reduction(DecomposeCall& c) {
  if (c.given("size_average") || c.given("reduce")) c.unsupported("size_average/reduce (deprecated)");
}

int reduce_loss(DecomposeCall& c, int loss) {
  const std::string reduction = c.text("reduction");
  if (reduction == "none") return loss;
  if (reduction == "sum") return c.b.reduce(Prim::Sum, loss, {}, false);
  if (reduction == "mean") return mean(c.b, loss, {}, false);
  c.unsupported("reduction='" + reduction + "'");
}

// nll over log-probabilities `logp` ([C] or [N, C, ...]) and class indices.
int nll(DecomposeCall& c, int logp) {
  PrimBuilder& b = c.b;
  int target = c.tensor("target");
  if (b.meta(target).dtype != DType::Int64) c.unsupported("target is not int64 class indices");
  const bool unbatched = c.rank(logp) == 1;
  if (unbatched) {
    logp = b.unsqueeze(logp, 0);
    target = b.unsqueeze(target, 0);
  }
  if (c.rank(logp) < 2) c.unsupported("input rank");
  const DType dtype = b.meta(logp).dtype;
  const int keep = b.binary(Prim::Ne, v(target), PrimArg::of_scalar(Scalar::of_int(c.integer("ignore_index"))));
  const int safe = b.where(keep, v(target), PrimArg::of_scalar(Scalar::of_int(0)));
  const int picked = b.squeeze(b.gather(logp, 1, b.unsqueeze(safe, 1)), {1});
  const PrimArg zero = PrimArg::of_scalar(Scalar::of_float(0));
  int loss = b.where(keep, v(b.unary(Prim::Neg, picked)), zero);
  int weight;
  if (c.given("weight")) {
    const int w = b.reshape(b.index_select(c.tensor("weight"), 0, b.reshape(safe, {-1})), b.meta(safe).sizes);
    weight = b.where(keep, v(w), zero);
    loss = b.binary(Prim::Mul, v(loss), v(weight));
  } else {
    weight = b.convert(keep, dtype);
  }
  const std::string reduction = c.text("reduction");
  if (reduction == "none") return unbatched ? b.squeeze(loss, {0}) : loss;
  const int total = b.reduce(Prim::Sum, loss, {}, false);
  if (reduction == "sum") return total;
  if (reduction == "mean") return b.binary(Prim::Div, v(total), v(b.reduce(Prim::Sum, weight, {}, false)));
  c.unsupported("reduction='" + reduction + "'");
}

}  // namespace

std::vector<int> decompose_MseLoss(DecomposeCall& c) {
  reject_legacy_reduction(c);
  const int diff = c.b.binary(Prim::Sub, v(c.tensor("input")), v(c.tensor("target")));
  return {reduce_loss(c, c.b.binary(Prim::Mul, v(diff), v(diff)))};
}

std::vector<int> decompose_NllLoss(DecomposeCall& c) {
  reject_legacy_reduction(c);
  return {nll(c, c.tensor("input"))};
}

std::vector<int> decompose_CrossEntropy(DecomposeCall& c) {
  reject_legacy_reduction(c);
  if (c.number("label_smoothing") != 0) c.unsupported("label_smoothing");
  const int input = c.tensor("input");
  if (!is_floating(c.b.meta(input).dtype)) c.unsupported("non-floating logits");
  return {nll(c, softmax(c.b, input, c.rank(input) == 1 ? 0 : 1, true))};
}

}  // namespace kiln::prims
