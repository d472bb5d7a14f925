// Derivative rule of matmul.
#include <numeric>

#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"

namespace kiln::autograd {

namespace {

// The operand with its last two dims swapped.
int transposed(prims::PrimBuilder& b, int x) {
  std::vector<int64_t> dims(b.meta(x).sizes.size());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  return b.permute(x, dims);
}

// The product of the sizes before the last two (the batch dims').
int64_t batch_numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (size_t i = 0; i + 2 < sizes.size(); ++i) n *= sizes[i];
  return n;
}

// gc of y = a @ c when c has no batch of its own (a Linear's weight): the
// sum over a's batch of a_i^T @ g_i is one product with the batch folded into
// the contraction, [k, B*n] @ [B*n, m]. One large product instead of B small
// ones and a reduction over their results.
int folded_rhs_grad(prims::PrimBuilder& b, int a, int g, const graph::TensorMeta& c_meta) {
  const std::vector<int64_t> a_sizes = b.meta(a).sizes;
  const std::vector<int64_t> g_sizes = b.meta(g).sizes;
  const int64_t k = a_sizes.back();
  const int64_t m = g_sizes.back();
  const int a2 = b.reshape(a, {-1, k});
  const int g2 = b.reshape(g, {-1, m});
  const int gc = b.matmul(transposed(b, a2), g2);
  return cast_to(b, c_meta.sizes.size() == 2 ? gc : b.reshape(gc, c_meta.sizes), c_meta.dtype);
}

}  // namespace

std::vector<int> vjp_matmul(prims::PrimBuilder& b, const NodeView& view,
                            const std::vector<int>& grads, const std::vector<bool>& needs) {
  // y = a @ c: ga = g @ c^T and gc = a^T @ g, each over the broadcast batch
  // dims, then summed down to the operand's own batch dims.
  const int a = view.inputs[0];
  const int c = view.inputs[1];
  const int g = grads[0];
  std::vector<int> out(2, -1);
  if (needs[0]) out[0] = sum_to(b, b.matmul(g, transposed(b, c)), b.meta(a));
  if (needs[1]) {
    const graph::TensorMeta c_meta = b.meta(c);
    const bool rhs_unbatched = batch_numel(c_meta.sizes) == 1 && b.meta(a).sizes.size() > 2 &&
                               b.meta(g).sizes.size() == b.meta(a).sizes.size();
    out[1] = rhs_unbatched ? folded_rhs_grad(b, a, g, c_meta)
                           : sum_to(b, b.matmul(transposed(b, a), g), c_meta);
  }
  return out;
}

}  // namespace kiln::autograd
