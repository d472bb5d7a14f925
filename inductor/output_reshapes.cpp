#include "inductor/output_reshapes.h"

#include <algorithm>
#include <unordered_set>

#include "prims/extern_writes.h"
#include "prims/layout.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Kernel outputs in their readers' shape]
// A kernel's result that feeds a matmul is usually flattened first: a
// linear layer reads [batch * length, hidden] where the layer norm or the
// gradient kernel before it computed [batch, length, hidden]. The reshape
// stayed a node of its own after scheduling (a view joins a group only as
// a producer read inside it), so each was one more executor step, an ATen
// view call of host time, between the kernel and the matmul (130 of the
// 261 reshape steps of a BERT training step on the dev machine). Where the reshape is the result's
// only reader outside its kernel, both tensors contiguous (the same
// elements in the same memory order), the kernel allocates its output in
// the reshape's shape instead (KernelOutput::tensor_sizes/strides; the
// stores, which follow the iteration space's strides, are unchanged) and
// the reshape's readers read the kernel's output. The reshape joins the
// group's nodes so the emitted graph has no step for it; the kernel's text
// names the tensor shape, so kernel caches key it. A result that is also a
// graph output, or read by anything else outside the kernel, keeps its
// shape and the reshape its step. A permute is the same relabeling of any
// layout: under autocast every linear layer's weight is converted to
// bfloat16 by a kernel and transposed for its matmul, and in inference
// the kernel now allocates the transposed tensor (a training forward
// saves the converted weight for the backward, so there the transpose
// keeps its step).

bool contiguous(const graph::TensorMeta& meta) { return prims::is_contiguous(meta.sizes, meta.strides); }

// True when `view`'s result is `from`'s memory relabeled: a permute (any
// layout), or a reshape or view of a contiguous value to a contiguous result.
bool relabels(const PrimNode& view, const graph::TensorMeta& from, const graph::TensorMeta& to) {
  if (from.dtype != to.dtype) return false;
  if (view.prim == Prim::Permute) return true;
  return (view.prim == Prim::Reshape || view.prim == Prim::View) && contiguous(from) && contiguous(to);
}

}  // namespace

int absorb_output_reshapes(const PrimGraph& graph, std::vector<KernelGroup>& groups,
                           std::vector<LoweredKernel>& lowered) {
  const int node_count = static_cast<int>(graph.nodes().size());
  std::vector<int> group_of(node_count, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int n : groups[g].nodes) group_of[n] = static_cast<int>(g);
  }
  std::vector<std::vector<int>> readers(graph.values().size());
  for (int n = 0; n < node_count; ++n) {
    for (int value : prims::node_reads(graph.node(n))) {
      std::vector<int>& list = readers[value];
      if (list.empty() || list.back() != n) list.push_back(n);
    }
  }
  const std::unordered_set<int> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  // Output i of group g takes its one outside reader's shape when that is
  // a view relabeling it; false when it has no such reader.
  auto absorb = [&](size_t g, size_t i) {
    LoweredKernel& kernel = lowered[g];
    const int value = kernel.outputs[i];
    if (graph_outputs.count(value)) return false;
    int outside = -1, count = 0;
    for (int reader : readers[value]) {
      if (group_of[reader] == static_cast<int>(g)) continue;
      outside = reader;
      ++count;
    }
    if (count != 1 || group_of[outside] >= 0) return false;
    const PrimNode& view = graph.node(outside);
    if (view.outputs.size() != 1 || view.args.empty() || !view.args[0].is_value() || view.args[0].value != value) {
      return false;
    }
    const graph::TensorMeta& from = graph.value(value).meta;
    const graph::TensorMeta& to = graph.value(view.outputs[0]).meta;
    KernelOutput& out = kernel.kernel.outputs[i];
    if (!relabels(view, from, to) || !out.has_tensor_shape || out.tensor_sizes != from.sizes ||
        out.tensor_strides != from.strides) {
      return false;
    }
    out.tensor_sizes = to.sizes;
    out.tensor_strides = to.strides;
    kernel.outputs[i] = view.outputs[0];
    std::vector<int>& nodes = groups[g].nodes;
    nodes.insert(std::upper_bound(nodes.begin(), nodes.end(), outside), outside);
    group_of[outside] = static_cast<int>(g);
    for (int& output : groups[g].outputs) {
      if (output == value) output = view.outputs[0];
    }
    return true;
  };
  int absorbed = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    // A chain of views (a reshape splitting heads, then their permute) one after another.
    for (size_t i = 0; i < lowered[g].outputs.size(); ++i) {
      while (absorb(g, i)) ++absorbed;
    }
  }
  return absorbed;
}

}  // namespace kiln::inductor
