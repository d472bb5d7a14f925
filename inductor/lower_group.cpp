#include "inductor/lower_group.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "inductor/simplify_casts.h"

namespace kiln::inductor {
namespace {

using prims::PrimGraph;
using prims::PrimNode;

// Note [Loop order]
// A reducing kernel's dims are reordered (inputs' and outputs' strides
// with them) so the loops walk memory well. The reference is the input
// that reads the most reduced dims, and of those the one reading the most
// dims (a broadcast mask beside attention scores would order the rows by
// its one strided kept dim, t, outside b and h); kept dims go outside, in its stride
// order, then the reduced dims in its stride order. When its smallest
// stride is in a kept dim (a reduction over outer dims, e.g. sum over dim
// 0 of a row-major matrix) that dim becomes the tile dim, innermost, so
// many results accumulate at once along unit-stride rows (Note [Reduction
// kernels]); otherwise the reduced dims are innermost and each kept point
// reduces a contiguous row. A pointwise kernel's dims follow its first
// output's strides, largest outside (stable, so ties keep the result's
// order): a transposed or channels-last result (whose layout TensorIterator
// takes from the inputs) is written, and mostly read, in memory order, and
// coalesce_dims then merges what became contiguous into one long dim.

// Reorders k's dims: new dim i is old dim order[i] (sizes, strides of the
// inputs, outputs and Index expressions; not the reduced list).
void permute_dims(Kernel& k, const std::vector<int>& order) {
  auto permute = [&](std::vector<int64_t>& values) {
    std::vector<int64_t> old = values;
    for (size_t i = 0; i < order.size(); ++i) values[i] = old[order[i]];
  };
  permute(k.sizes);
  for (KernelInput& in : k.inputs) permute(in.strides);
  for (KernelOutput& out : k.outputs) permute(out.strides);
  for (Expr& e : k.exprs) {
    if (e.kind == ExprKind::Index) permute(e.strides);  // a LoadAt's strides are per index, not per dim
  }
}

void choose_pointwise_order(Kernel& k) {
  if (k.outputs.empty()) return;
  const std::vector<int64_t>& strides = k.outputs[0].strides;
  std::vector<int> order(k.sizes.size());
  std::iota(order.begin(), order.end(), 0);
  auto magnitude = [&](int d) { return strides[d] < 0 ? -strides[d] : strides[d]; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return magnitude(a) > magnitude(b); });
  permute_dims(k, order);
}

void choose_loop_order(Kernel& k) {
  const int rank = static_cast<int>(k.sizes.size());
  if (k.reduced.empty()) {
    choose_pointwise_order(k);
    return;
  }
  if (k.inputs.empty()) return;
  int reference = 0;
  std::pair<int, int> best{-1, -1};  // (reduced dims read, dims read)
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    std::pair<int, int> reads{0, 0};
    for (int d : k.reduced) reads.first += k.inputs[i].strides[d] != 0 ? 1 : 0;
    for (int d = 0; d < rank; ++d) reads.second += k.inputs[i].strides[d] != 0 && k.sizes[d] > 1 ? 1 : 0;
    if (reads > best) best = reads, reference = static_cast<int>(i);
  }
  const std::vector<int64_t>& strides = k.inputs[reference].strides;
  auto magnitude = [&](int d) { return strides[d] < 0 ? -strides[d] : strides[d]; };
  std::vector<int> kept, reduced(k.reduced.begin(), k.reduced.end());
  for (int d = 0; d < rank; ++d) {
    if (!is_reduced(k, d)) kept.push_back(d);
  }
  auto by_stride = [&](int a, int b) { return magnitude(a) > magnitude(b); };
  std::stable_sort(kept.begin(), kept.end(), by_stride);
  std::stable_sort(reduced.begin(), reduced.end(), by_stride);
  int innermost = -1;
  for (int d = 0; d < rank; ++d) {
    if (k.sizes[d] <= 1 || strides[d] == 0) continue;
    if (innermost < 0 || magnitude(d) < magnitude(innermost)) innermost = d;
  }
  std::vector<int> order;
  int tile = -1;
  if (innermost >= 0 && !is_reduced(k, innermost)) tile = innermost;
  for (int d : kept) {
    if (d != tile) order.push_back(d);
  }
  std::vector<int> new_reduced;
  for (int d : reduced) {
    new_reduced.push_back(static_cast<int>(order.size()));
    order.push_back(d);
  }
  if (tile >= 0) order.push_back(tile);
  permute_dims(k, order);
  k.reduced = new_reduced;
}

// The first node of the group that reduces, or -1.
int first_reduction(const PrimGraph& graph, const KernelGroup& group) {
  for (int n : group.nodes) {
    if (is_kernel_reduction(graph, graph.node(n))) return n;
  }
  return -1;
}

}  // namespace

LoweredKernel lower_group(const PrimGraph& graph, const KernelGroup& group) {
  if (group.nodes.empty() || group.outputs.empty()) throw LoweringError("an empty group");
  LoweredKernel out;
  Kernel& k = out.kernel;
  const int reduction = first_reduction(graph, group);
  std::vector<int64_t> dims;
  if (reduction >= 0) {
    const PrimNode& node = graph.node(reduction);
    k.sizes = graph.value(node.args[0].value).meta.sizes;
    dims = reduction_dims(graph, node);
    for (int64_t d : dims) k.reduced.push_back(static_cast<int>(d));
    k.name = prims::prim_name(node.prim);
  } else {
    k.sizes = graph.value(group.outputs[0]).meta.sizes;
    k.name = prims::prim_name(graph.node(group.nodes.back()).prim);
  }
  const size_t rank = k.sizes.size();
  // The two result shapes of a reduction: keepdim and not.
  std::vector<int64_t> kept_shape, reduced_shape;
  for (size_t d = 0; d < rank; ++d) {
    const bool r = std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(d));
    kept_shape.push_back(r ? 1 : k.sizes[d]);
    if (!r) reduced_shape.push_back(k.sizes[d]);
  }
  ValueLowering lowering(graph, group.nodes, &out);
  for (int value : group.outputs) {
    const graph::TensorMeta& meta = graph.value(value).meta;
    ValueLowering::IndexMap map;
    if (meta.sizes == k.sizes) {
      map = ValueLowering::identity(rank);
    } else if (reduction >= 0 && meta.sizes == kept_shape) {
      for (size_t d = 0; d < rank; ++d) {
        map.push_back(kept_shape[d] == 1 && k.sizes[d] != 1 ? IndexTerm{} : IndexTerm::along(static_cast<int>(d)));
      }
    } else if (reduction >= 0 && meta.sizes == reduced_shape) {
      for (size_t d = 0; d < rank; ++d) {
        if (!std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(d))) {
          map.push_back(IndexTerm::along(static_cast<int>(d)));
        }
      }
    } else {
      throw LoweringError("a result of another shape than the kernel's space or its reduction");
    }
    const int expr = lowering.emit(value, map);
    KernelOutput output;
    output.dtype = meta.dtype;
    output.value = expr;
    output.strides.assign(rank, 0);
    for (size_t j = 0; j < map.size(); ++j) {
      if (map[j].dim >= 0) output.strides[map[j].dim] = meta.strides[j];
    }
    output.has_tensor_shape = true;
    output.tensor_sizes = meta.sizes;
    output.tensor_strides = meta.strides;
    k.add_output(std::move(output));
    out.outputs.push_back(value);
  }
  simplify_casts(k);
  choose_loop_order(k);
  coalesce_dims(k);
  const std::string problem = verify(k);
  if (!problem.empty()) throw LoweringError("lowered kernel is invalid: " + problem);
  return out;
}

}  // namespace kiln::inductor
