// Derivative rule of matmul.
#include <algorithm>
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

// True for a matrix stored column by column (a transposed view of a
// contiguous one: a Linear's W^T, attention's k^T).
bool column_major(const graph::TensorMeta& m) {
  const size_t r = m.sizes.size();
  return r >= 2 && m.sizes[r - 1] > 1 && m.sizes[r - 2] > 1 && m.strides[r - 2] == 1 && m.strides[r - 1] != 1;
}

bool same_batch(const graph::TensorMeta& x, const graph::TensorMeta& y) {
  return x.sizes.size() == y.sizes.size() && std::equal(x.sizes.begin(), x.sizes.end() - 2, y.sizes.begin());
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
  // Copies: adding values to the graph moves the metas.
  const graph::TensorMeta ma = b.meta(a);
  const graph::TensorMeta mc = b.meta(c);
  if (mc.sizes.size() == 2 && ma.sizes.size() > 2) {
    // c is a matrix shared by every batch (a Linear's weight): both
    // gradients are one product over a's batch dims as rows, as torch folds
    // the batch into mm. ga = g_rows @ c^T (g arrives permuted when the
    // result was, and at::matmul would broadcast c into a bmm); gc =
    // a_rows^T @ g_rows, not a batch of products summed after.
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < ma.sizes.size(); ++d) rows *= ma.sizes[d];
    const int g_rows = b.reshape(g, {rows, mc.sizes.back()});
    if (needs[0]) out[0] = b.reshape(b.matmul(g_rows, transposed(b, c)), ma.sizes);
    if (needs[1]) {
      const int a_rows = b.reshape(a, {rows, ma.sizes.back()});
      out[1] = column_major(mc) ? transposed(b, b.matmul(transposed(b, g_rows), a_rows))
                                : b.matmul(transposed(b, a_rows), g_rows);
    }
    return out;
  }
  // A column-major operand gets its gradient column-major too, computed
  // as the transpose of the transposed product ((g c^T)^T = c g^T), so
  // that the gradient of the tensor it views (a Linear's weight) comes out
  // in that tensor's layout: autograd would otherwise copy every weight
  // gradient into the parameter's layout (session 8).
  if (needs[0]) {
    out[0] = column_major(ma) && same_batch(ma, mc) ? transposed(b, b.matmul(c, transposed(b, g)))
                                                     : sum_to(b, b.matmul(g, transposed(b, c)), ma);
  }
  if (needs[1]) {
    if (column_major(mc) && same_batch(ma, mc)) {
      out[1] = transposed(b, b.matmul(transposed(b, g), a));
    } else {
      out[1] = sum_to(b, b.matmul(transposed(b, a), g), mc);
    }
  }
  return out;
}

}  // namespace kiln::autograd
