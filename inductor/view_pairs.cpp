#include "inductor/view_pairs.h"

#include <optional>
#include <set>
#include <vector>

#include "inductor/node_rewrite.h"
#include "prims/view_meta.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [View pairs]
// Gradient rules transpose what the forward transposed: a linear layer is a
// matmul with its weight permuted, and the matmul's gradient permutes that
// operand again. A BERT backward graph (12 layers) held 146
// permute-of-permute pairs, one per matmul and each the identity, and
// reshape-of-reshape pairs where attention's output is flattened for its
// projection ([2, 128, 12, 64] -> [2, 128, 768] -> [256, 768]). Views that
// feed matmuls and other torch calls run as executor steps, each an ATen
// call of about 1.5 us of host time on the H100 machines, where training
// steps are bound by host time: folding removed 244 of that graph's 898
// executor steps. A permute of a permute is one permute of the first one's input,
// the dims composed; a reshape or view of a reshape or view that is a view
// is one reshape of its input, kept only where that is a view with the same
// layout (so no copy is added or dropped); where the result is the input
// itself (same sizes and strides), readers read the input (unless the
// result is a graph output whose base is a graph input or output, or the base of
// another identity output: those keep a node of their own, so no value is
// returned twice and no input comes back as an output). A weight's gradient is
// such an output: the matmul's transposed result transposed back, an executor
// step per weight (43 in a 6-layer Llama backward) for no work. Kernels read
// views through their strides either way; a kernel changes only where it
// read one value both directly and through an identity chain (a
// log_softmax recomputed its input through one), and now reads it once.

bool reshape_like(Prim prim) { return prim == Prim::Reshape || prim == Prim::View; }

// The node's one value argument, or -1.
int value_arg(const PrimNode& node) {
  return !node.args.empty() && node.args[0].is_value() ? node.args[0].value : -1;
}

// How node `n` folds: the base value and, for a permute, the composed dims.
struct Fold {
  int base = -1;
  Prim prim = Prim::Permute;
  std::vector<int64_t> dims;  // permute
  bool identity = false;      // the result is the base itself
};

std::optional<Fold> fold_of(const PrimGraph& graph, const PrimNode& node, const std::vector<int>& producer) {
  const int arg = value_arg(node);
  if (arg < 0 || producer[arg] < 0) return std::nullopt;
  const PrimNode& inner = graph.node(producer[arg]);
  const int base = value_arg(inner);
  if (base < 0) return std::nullopt;
  Fold fold;
  fold.base = base;
  fold.prim = node.prim;
  const graph::TensorMeta& want = graph.value(node.outputs[0]).meta;
  const graph::TensorMeta& from = graph.value(base).meta;
  if (node.prim == Prim::Permute && inner.prim == Prim::Permute) {
    fold.identity = true;
    for (size_t d = 0; d < node.attrs.dims.size(); ++d) {
      fold.dims.push_back(inner.attrs.dims[node.attrs.dims[d]]);
      fold.identity = fold.identity && fold.dims[d] == static_cast<int64_t>(d);
    }
    return fold;
  }
  if (reshape_like(node.prim) && reshape_like(inner.prim)) {
    if (!prims::reshape_meta(from, graph.value(arg).meta.sizes).is_view) return std::nullopt;
    const prims::ReshapeMeta direct = prims::reshape_meta(from, want.sizes);
    if (!direct.is_view || direct.meta.strides != want.strides) return std::nullopt;
    fold.prim = Prim::Reshape;
    fold.identity = from.sizes == want.sizes && from.strides == want.strides;
    return fold;
  }
  return std::nullopt;
}

}  // namespace

bool fold_view_pairs(const PrimGraph& graph, PrimGraph* out) {
  std::vector<int> producer(graph.values().size(), -1);
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    for (int id : graph.node(n).outputs) producer[id] = static_cast<int>(n);
  }
  const std::set<int> outputs(graph.outputs().begin(), graph.outputs().end());
  const std::set<int> inputs(graph.inputs().begin(), graph.inputs().end());
  std::set<int> bases_output;  // bases an identity output already stands for
  std::vector<std::optional<Fold>> folds(graph.nodes().size());
  bool any = false;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const PrimNode& node = graph.node(n);
    if (node.prim != Prim::Permute && !reshape_like(node.prim)) continue;
    folds[n] = fold_of(graph, node, producer);
    if (folds[n] && folds[n]->identity && outputs.count(node.outputs[0]) > 0) {
      const int base = folds[n]->base;
      const bool own_value = inputs.count(base) == 0 && outputs.count(base) == 0 && bases_output.insert(base).second;
      if (!own_value) folds[n]->identity = false;
    }
    any = any || folds[n].has_value();
  }
  if (!any) return false;
  auto action = [&](size_t n) { return folds[n] ? NodeAction::Replace : NodeAction::Copy; };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const Fold& fold = *folds[n];
    const graph::TensorMeta& want = graph.value(graph.node(n).outputs[0]).meta;
    const int made = fold.identity                ? map[fold.base]
                     : fold.prim == Prim::Permute ? b.permute(map[fold.base], fold.dims)
                                                  : b.reshape(map[fold.base], want.sizes);
    const graph::TensorMeta& got = b.meta(made);
    return got.sizes == want.sizes && got.strides == want.strides && got.dtype == want.dtype ? made : -1;
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
