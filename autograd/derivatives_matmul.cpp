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
  // dims, then summed down to the operand's own batch dims; gc of a matrix c
  // under a batched a is one product over the batch instead.
  const int a = view.inputs[0];
  const int c = view.inputs[1];
  const int g = grads[0];
  std::vector<int> out(2, -1);
  if (needs[0]) out[0] = sum_to(b, b.matmul(g, transposed(b, c)), b.meta(a));
  if (needs[1]) {
    // Copies: adding values to the graph moves the metas.
    const graph::TensorMeta ma = b.meta(a);
    const graph::TensorMeta mc = b.meta(c);
    if (mc.sizes.size() == 2 && ma.sizes.size() > 2) {
      // c is a matrix shared by every batch (a Linear's weight): its
      // gradient is one product with a's batch dims as rows, a_rows^T @
      // g_rows (as torch's, which folds the batch into mm), not a batch of
      // products summed after.
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < ma.sizes.size(); ++d) rows *= ma.sizes[d];
      const int a_rows = b.reshape(a, {rows, ma.sizes.back()});
      const int g_rows = b.reshape(g, {rows, mc.sizes.back()});
      out[1] = b.matmul(transposed(b, a_rows), g_rows);
    } else {
      out[1] = sum_to(b, b.matmul(transposed(b, a), g), mc);
    }
  }
  return out;
}

}  // namespace kiln::autograd
