// Decompositions of tensor factories (zeros, ones, full, empty, *_like,
// arange, rand, randn, bernoulli). Sizes, dtype and device come from the
// traced result, which torch computed from every argument form these
// functions accept.
#include "prims/decompositions.h"
#include "prims/layout.h"

namespace kiln::prims {
namespace {

Placement placement_of(const DecomposeCall& c) {
  const graph::TensorMeta& out = c.traced();
  if (out.requires_grad) c.unsupported("requires_grad=True");
  return Placement{out.device_type, out.device_index, false};
}

std::vector<int> filled(DecomposeCall& c, Scalar value) {
  const graph::TensorMeta& out = c.traced();
  return {c.b.full(out.sizes, value, out.dtype, placement_of(c))};
}

// *_like results copy an input's layout (torch's preserve_format): a
// full() in the input's dim order, permuted back (a transposed conv output's
// zeros_like, RecurrentGemma's scan buffer).
std::vector<int> filled_like(DecomposeCall& c, Scalar value) {
  const graph::TensorMeta& m = c.b.meta(c.tensor("input"));
  const graph::TensorMeta& out = c.traced();
  if (is_contiguous(m.sizes, m.strides)) return filled(c, value);
  // A layout that is not dense (Longformer's overlapping as_strided
  // windows) gives dense strides in its dim order.
  const std::vector<int64_t> order = dense_dim_order(m.sizes, preserved_strides(m.sizes, m.strides));
  std::vector<int64_t> sizes, inverse(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    sizes.push_back(out.sizes[order[k]]);
    inverse[order[k]] = static_cast<int64_t>(k);
  }
  return {c.b.permute(c.b.full(sizes, value, out.dtype, placement_of(c)), inverse)};
}

}  // namespace

std::vector<int> decompose_Zeros(DecomposeCall& c) { return filled(c, Scalar::of_int(0)); }
std::vector<int> decompose_Ones(DecomposeCall& c) { return filled(c, Scalar::of_int(1)); }

std::vector<int> decompose_Full(DecomposeCall& c) {
  PrimArg value = c.operand("fill_value");
  if (value.is_value()) c.unsupported("a tensor fill value");
  return filled(c, value.scalar);
}

std::vector<int> decompose_ZerosLike(DecomposeCall& c) { return filled_like(c, Scalar::of_int(0)); }

std::vector<int> decompose_FullLike(DecomposeCall& c) {
  PrimArg value = c.operand("fill_value");
  if (value.is_value()) c.unsupported("a tensor fill value");
  return filled_like(c, value.scalar);
}

std::vector<int> decompose_OnesLike(DecomposeCall& c) { return filled_like(c, Scalar::of_int(1)); }

// x.new_zeros(...) and kin read x for its dtype and device only: a factory,
// not an extern joined to x's storage (Note [Writes in the joint graph]:
// Swin fills such a mask by setitem, which pinned everything computed
// from x to the forward and tripled what its shifted blocks saved).
std::vector<int> decompose_NewZeros(DecomposeCall& c) { return filled(c, Scalar::of_int(0)); }
std::vector<int> decompose_NewOnes(DecomposeCall& c) { return filled(c, Scalar::of_int(1)); }

std::vector<int> decompose_NewFull(DecomposeCall& c) {
  PrimArg value = c.operand("fill_value");
  if (value.is_value()) c.unsupported("a tensor fill value");
  return filled(c, value.scalar);
}

// arange(end), arange(start, end), arange(start, end, step) over ints.
// torch.arange(end), arange(start, end[, step]), with any of start, end
// and step by keyword after the positionals (arange(0, end=n)).
std::vector<int> decompose_Arange(DecomposeCall& c) {
  std::vector<int64_t> args = c.ints("args");
  const bool keywords = c.given("start") || c.given("end") || c.given("step");
  if (keywords) {
    if (args.size() > 2 || (c.given("end") && args.size() > 1) || (c.given("start") && !args.empty())) {
      c.unsupported("arange with a bound both positional and by keyword");
    }
    int64_t start = 0, end = 0;
    if (c.given("end")) {
      end = c.integer("end");
      start = !args.empty() ? args[0] : c.given("start") ? c.integer("start") : 0;
    } else if (args.size() == 2) {
      start = args[0];
      end = args[1];
    } else if (args.size() == 1) {
      end = args[0];
    } else {
      c.unsupported("arange without an end");
    }
    args = {start, end, c.given("step") ? c.integer("step") : 1};
  }
  if (args.empty() || args.size() > 3) c.unsupported("arange with " + std::to_string(args.size()) + " arguments");
  const int64_t start = args.size() == 1 ? 0 : args[0];
  const int64_t step = args.size() == 3 ? args[2] : 1;
  const graph::TensorMeta& out = c.traced();
  return {c.b.iota(out.sizes.at(0), start, step, out.dtype, placement_of(c))};
}

// torch.empty and kin: memory whose values the program must not read
// before writing them, so a full() of zeros is one correct answer (a
// stochastic depth's torch.empty(...).bernoulli_(p), functionalized, never
// reads it: the full() is dead), contiguous as torch's.
std::vector<int> decompose_Empty(DecomposeCall& c) { return filled(c, Scalar::of_int(0)); }
std::vector<int> decompose_NewEmpty(DecomposeCall& c) { return filled(c, Scalar::of_int(0)); }

// empty_like's memory_format decided the traced layout (preserve_format the
// input's, or the one asked): zeros laid out as traced.
std::vector<int> decompose_EmptyLike(DecomposeCall& c) {
  return {in_traced_layout(c.b, filled(c, Scalar::of_int(0))[0], c.traced())};
}

std::vector<int> decompose_Rand(DecomposeCall& c) {
  const graph::TensorMeta& out = c.traced();
  return {c.b.uniform(out.sizes, 0, 1, out.dtype, placement_of(c))};
}

std::vector<int> decompose_Randn(DecomposeCall& c) {
  const graph::TensorMeta& out = c.traced();
  return {c.b.normal(out.sizes, 0, 1, out.dtype, placement_of(c))};
}

// x.bernoulli(p) (0/1 draws with probability p, x's shape and dtype; the
// out-of-place twin of the stochastic depth's x.bernoulli_(p)) and
// torch.bernoulli(probs) (probabilities the input's elements), drawn from
// torch's generator as dropout's mask is: deterministic under
// torch.manual_seed, not eager's numbers.
std::vector<int> decompose_Bernoulli(DecomposeCall& c) {
  if (c.given("generator")) c.unsupported("an explicit generator");
  const int input = c.tensor("input");
  const graph::TensorMeta& m = c.b.meta(input);
  if (!is_floating(m.dtype)) c.unsupported("draws into a non-floating tensor");
  if (!c.given("p")) return {c.b.bernoulli(input)};
  const PrimArg p = c.operand("p");
  if (p.is_value()) c.unsupported("a tensor p");
  const int probabilities = c.b.full(m.sizes, Scalar::of_float(c.number("p")), m.dtype,
                                     Placement{m.device_type, m.device_index, false});
  return {c.b.bernoulli(probabilities)};
}

}  // namespace kiln::prims
