#include "inductor/kernel_copies.h"

#include <map>
#include <utility>
#include <vector>

#include "prims/prim_builder.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"
#include "prims/view_meta.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Kernel copies]
// Some ops copy inside torch: a reshape that cannot view its input, and
// matmul. The prim executor runs a matmul node as torch.matmul, which on CUDA hands
// cuBLAS one strided batch of matrices: the operands' batch dims (broadcast
// against each other) must merge into one stride, and each matrix needs a
// unit stride in one of its dims with the other at least as long as a row
// (a column). An operand that is not so, torch copies first with its
// generic strided copy. Attention is the common case: q, k and v are views
// of one [b, t, 3c] projection, [b, h, t, d] with strides (3tc, d, 3c, 1),
// whose (b, h) dims do not merge; the output's gradient, viewed back to
// heads, is another. Those copies took 1.8 ms of a 12 ms GPT training step
// on an H200 (session 6's profile).
//
// Before scheduling, each such operand of a CUDA graph becomes a clone
// the kernels compute: fused into the producer's kernel where the
// scheduler can, else a copy kernel with 16-byte accesses. The clone keeps
// the operand's unit-stride matrix dim innermost (a transposed k^T is
// cloned as k, contiguous, then transposed back as a view), so the copy
// reads and writes along the same dim. The rule is torch 2's matmul on
// CUDA (fold when free, else expand and reshape to one batch dim, then
// cuBLAS's layout check); where the rule is unsure (a matrix dim of size
// 1, an empty operand) the operand stays as it is. A reshape that cannot
// view (attention's output, [b, h, t, d] transposed to [b, t, h, d] and
// merged to [b, t, h * d], and the same of q, k and v's gradients) becomes
// a contiguous clone, a kernel, and a reshape that views it: on the CPU
// too, where the clone's kernel also reads what it copies where it lies
// (Swin's windows cut from a rolled image, Note [Cat in kernels]).

// A dim of an operand after broadcasting its batch dims.
struct Dim {
  int64_t size;
  int64_t stride;
};

// `x`'s batch dims expanded to the broadcast of `x`'s and `other`'s, as
// torch.matmul's expand does (stride 0 where x has size 1 or no dim).
std::vector<Dim> expanded_batch(const graph::TensorMeta& x, const graph::TensorMeta& other) {
  const int xb = static_cast<int>(x.sizes.size()) - 2;
  const int ob = static_cast<int>(other.sizes.size()) - 2;
  const int nb = std::max(xb, ob);
  std::vector<Dim> dims;
  for (int j = 0; j < nb; ++j) {
    const int i = j - (nb - xb), o = j - (nb - ob);
    const int64_t xs = i >= 0 ? x.sizes[i] : 1, os = o >= 0 ? other.sizes[o] : 1;
    const int64_t size = std::max(xs, os);
    dims.push_back({size, i >= 0 && xs == size ? x.strides[i] : 0});
  }
  return dims;
}

// True when the dims merge into one by a view (size-1 dims ignored).
bool merge_into_one(const std::vector<Dim>& dims) {
  const Dim* inner = nullptr;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (it->size == 1) continue;
    if (inner && it->stride != inner->stride * inner->size) return false;
    inner = &*it;
  }
  return true;
}

// Whether the copy keeps the matrix transposed: its rows' stride is the
// smaller (k^T of a row-major k), so the clone is k^T's transpose made
// contiguous (Note [Kernel copies]).
bool copy_transposed(const graph::TensorMeta& x) {
  const size_t rank = x.sizes.size();
  return x.strides[rank - 2] < x.strides[rank - 1];
}

// The layout of `x`'s copy.
graph::TensorMeta copy_layout(const graph::TensorMeta& x) {
  graph::TensorMeta copy = x;
  const size_t rank = x.sizes.size();
  const bool transposed = copy_transposed(x);
  std::vector<int64_t> order(rank);  // dims, outermost first
  for (size_t d = 0; d < rank; ++d) order[d] = static_cast<int64_t>(d);
  if (transposed) std::swap(order[rank - 2], order[rank - 1]);
  int64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    copy.strides[order[i]] = stride;
    stride *= x.sizes[order[i]];
  }
  return copy;
}

}  // namespace

bool matmul_copies_operand(const graph::TensorMeta& x, const graph::TensorMeta& other) {
  const size_t rank = x.sizes.size();
  if (rank < 2 || other.sizes.size() < 2) return false;
  const int64_t rows = x.sizes[rank - 2], cols = x.sizes[rank - 1];
  if (rows <= 1 || cols <= 1) return false;
  for (int64_t size : x.sizes) {
    if (size == 0) return false;
  }
  const int64_t row_stride = x.strides[rank - 2], col_stride = x.strides[rank - 1];
  const bool matrix_ok =
      (col_stride == 1 && row_stride >= cols) || (row_stride == 1 && col_stride >= rows);
  return !matrix_ok || !merge_into_one(expanded_batch(x, other));
}

namespace {

// True when torch would copy `x` and kiln's copy (copy_layout) it would not.
bool copy_helps(const graph::TensorMeta& x, const graph::TensorMeta& other) {
  return matmul_copies_operand(x, other) && !matmul_copies_operand(copy_layout(x), other);
}

// True when `node` is a reshape torch runs as a copy.
bool copying_reshape(const PrimGraph& graph, const PrimNode& node) {
  if (node.prim != Prim::Reshape || node.args.empty() || !node.args[0].is_value()) return false;
  return !prims::view_strides(graph.value(node.args[0].value).meta, graph.value(node.outputs[0]).meta.sizes);
}

}  // namespace

bool make_copies_explicit(const PrimGraph& graph, bool matmul_operands, PrimGraph* out) {
  bool any = false;
  for (const PrimNode& node : graph.nodes()) {
    if (copying_reshape(graph, node)) any = true;
    if (!matmul_operands || node.prim != Prim::Matmul || node.args.size() != 2) continue;
    const graph::TensorMeta& a = graph.value(node.args[0].value).meta;
    const graph::TensorMeta& b = graph.value(node.args[1].value).meta;
    any = any || copy_helps(a, b) || copy_helps(b, a);
  }
  if (!any) return false;
  PrimGraph result;
  try {
    std::vector<int> map = prims::copy_inputs(result, graph);
    prims::PrimBuilder builder(result);
    std::map<int, int> copies;  // operand value (in `graph`) -> its clone (in `result`)
    auto copy_of = [&](int value) {
      if (auto found = copies.find(value); found != copies.end()) return found->second;
      const graph::TensorMeta& meta = graph.value(value).meta;
      const int64_t rank = static_cast<int64_t>(meta.sizes.size());
      int clone;
      if (copy_transposed(meta)) {
        std::vector<int64_t> swap(rank);
        for (int64_t d = 0; d < rank; ++d) swap[d] = d;
        std::swap(swap[rank - 2], swap[rank - 1]);
        const int inner = builder.clone(builder.permute(map[value], swap), prims::MemoryFormat::Contiguous);
        clone = builder.permute(inner, swap);
      } else {
        clone = builder.clone(map[value], prims::MemoryFormat::Contiguous);
      }
      copies.emplace(value, clone);
      return clone;
    };
    for (const PrimNode& node : graph.nodes()) {
      std::vector<int> made;
      const bool matmul = matmul_operands && node.prim == Prim::Matmul && node.args.size() == 2;
      const int a = matmul ? node.args[0].value : -1, b = matmul ? node.args[1].value : -1;
      const bool copy_a = matmul && copy_helps(graph.value(a).meta, graph.value(b).meta);
      const bool copy_b = matmul && copy_helps(graph.value(b).meta, graph.value(a).meta);
      if (copy_a || copy_b) {
        made = {builder.matmul(copy_a ? copy_of(a) : map[a], copy_b ? copy_of(b) : map[b])};
        if (graph.value(node.outputs[0]).grad_stopped) result.stop_grad(made[0]);
      } else if (copying_reshape(graph, node)) {
        const int copy = builder.clone(map[node.args[0].value], prims::MemoryFormat::Contiguous);
        made = {builder.reshape(copy, graph.value(node.outputs[0]).meta.sizes)};
        if (graph.value(node.outputs[0]).grad_stopped) result.stop_grad(made[0]);
      } else {
        made = prims::copy_node(result, graph, node, map);
      }
      for (size_t i = 0; i < made.size(); ++i) map[node.outputs[i]] = made[i];
    }
    prims::copy_outputs(result, graph, map);
  } catch (const prims::PrimError&) {
    return false;  // a view the meta rules refuse: the graph stays as it is
  }
  *out = std::move(result);
  return true;
}

}  // namespace kiln::inductor
