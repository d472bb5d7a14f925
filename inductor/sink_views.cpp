#include "inductor/sink_views.h"

#include <vector>

#include "inductor/kernel_ir.h"
#include "inductor/lower_values.h"
#include "inductor/node_rewrite.h"
#include "inductor/schedule.h"
#include "prims/layout.h"
#include "prims/prim_builder.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Casts above reshapes]
// Written when a reshape that merges or splits dims of a computed value
// ended the kernel computing it (before Note [Reshapes in kernels]). Under
// CUDA autocast that is where the float32 results of layer_norm, of
// GELU's pow and of attention meet their linear layer:
// Linear/Conv1D flatten the rows ([8, 512, 3072] -> [4096, 3072]), then
// autocast converts to bfloat16. The float32 value went to memory and a
// second kernel read it back to convert it: for GPT-2's MLP a 50 MB write
// and read a layer that torch.compile's fused kernel never makes. A
// conversion commutes with a reshape of a contiguous tensor (same
// elements, same order), so convert(reshape(x)) becomes
// reshape(convert(x)): the conversion joins x's kernel, the reshape is a
// view of its contiguous result, and the float32 value is not stored
// unless something else reads it. Kept since: it puts the conversion in
// x's kernel whatever else reads x (a reader of the reshape folds it only
// where x has no other reader). Narrowing conversions only: a widening
// one belongs with its reader, which then reads the narrower value.

std::vector<int64_t> non_unit(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> kept;
  for (int64_t s : sizes) {
    if (s != 1) kept.push_back(s);
  }
  return kept;
}

bool merges_or_splits(const PrimGraph& graph, const PrimNode& view) {
  if (view.prim != Prim::Reshape && view.prim != Prim::View) return false;
  const graph::TensorMeta& in = graph.value(view.args[0].value).meta;
  const graph::TensorMeta& out = graph.value(view.outputs[0]).meta;
  return non_unit(in.sizes) != non_unit(out.sizes) && prims::is_contiguous(in.sizes, in.strides) &&
         prims::is_contiguous(out.sizes, out.strides);
}

// The reshape a qualifying conversion reads, or -1.
int sunk_view(const PrimGraph& graph, const PrimNode& node, const std::vector<int>& producer) {
  if (node.prim != Prim::ConvertElementType || node.args.empty() || !node.args[0].is_value()) return -1;
  const int view = producer[node.args[0].value];
  if (view < 0 || !merges_or_splits(graph, graph.node(view))) return -1;
  const int source = producer[graph.node(view).args[0].value];
  // Only where the conversion can then join the kernel computing the value.
  if (source < 0 || (!is_elementwise(graph, graph.node(source)) && !is_kernel_reduction(graph, graph.node(source)))) {
    return -1;
  }
  const graph::TensorMeta& out = graph.value(node.outputs[0]).meta;
  if (!prims::is_contiguous(out.sizes, out.strides)) return -1;
  // Only a narrowing conversion: a widening one moved into the producer
  // would have it store the wider value (GPT-2's h.float() before pow
  // made its bias kernel write float32 for the GELU kernel to read).
  const graph::DType from = graph.value(node.args[0].value).meta.dtype;
  if (item_size(out.dtype) >= item_size(from)) return -1;
  return view;
}

}  // namespace

bool sink_reshapes_below_casts(const PrimGraph& graph, PrimGraph* out) {
  std::vector<int> producer(graph.values().size(), -1);
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    for (int id : graph.node(n).outputs) producer[id] = static_cast<int>(n);
  }
  std::vector<int> view_of(graph.nodes().size(), -1);
  bool any = false;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    view_of[n] = sunk_view(graph, graph.node(n), producer);
    any = any || view_of[n] >= 0;
  }
  if (!any) return false;
  // A reshape read only by conversions that now read its input is dropped:
  // copied, it would keep the float32 value alive as a kernel output.
  std::vector<bool> dropped(graph.nodes().size(), false);
  {
    std::vector<int> other_uses(graph.values().size(), 0);
    for (size_t n = 0; n < graph.nodes().size(); ++n) {
      if (view_of[n] >= 0) continue;
      for (int id : node_reads(graph.node(n))) ++other_uses[id];
    }
    for (int id : graph.outputs()) ++other_uses[id];
    for (size_t n = 0; n < graph.nodes().size(); ++n) {
      if (view_of[n] >= 0 && other_uses[graph.node(view_of[n]).outputs[0]] == 0) dropped[view_of[n]] = true;
    }
  }
  auto action = [&](size_t n) {
    return dropped[n] ? NodeAction::Drop : view_of[n] < 0 ? NodeAction::Copy : NodeAction::Replace;
  };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const int source = graph.node(view_of[n]).args[0].value;
    const graph::TensorMeta want = graph.value(graph.node(n).outputs[0]).meta;
    const int reshaped = b.reshape(b.convert(map[source], want.dtype), want.sizes);
    const graph::TensorMeta& got = b.meta(reshaped);
    return got.sizes == want.sizes && got.strides == want.strides && got.dtype == want.dtype ? reshaped : -1;
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
