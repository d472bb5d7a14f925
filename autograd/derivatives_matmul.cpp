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
  if (needs[1]) out[1] = sum_to(b, b.matmul(transposed(b, a), g), b.meta(c));
  return out;
}

}  // namespace kiln::autograd
