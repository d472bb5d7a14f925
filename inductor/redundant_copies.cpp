#include "inductor/redundant_copies.h"

#include <algorithm>
#include <vector>

#include "inductor/node_rewrite.h"
#include "prims/extern_writes.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Copies undone by permutes]
// A fused attention kernel returns its output in the query's dim order
// ([B, T, H, D] in memory) where torch's meta kernels, which the trace
// ran, return it contiguous; the decomposition copies it contiguous
// (attention_output in prims/decompose_nn.cpp) so that the views the trace
// recorded after it hold. The model then transposes it back to [B, T, H,
// D] and calls .contiguous(), a second copy, which the first made
// necessary: every attention layer of the transformers zoo ran one copy
// kernel (both copies fused) to end where the kernel's output already
// was. When the second copy's layout is what the permutes give applied to
// the first copy's input, the second copy is those permutes of that input,
// a view, and both copies go. Only where no one else can see the
// difference: x may be read elsewhere (the attention's backward reads
// it), be a graph output (a training forward saves it) or a graph input (a
// backward recomputing the chain reads it so), but each value of the chain
// is read once; nothing the second copy's views
// reach is a graph output (two outputs, or an output and an input, would
// share storage eager keeps apart) and no extern may write x or the
// second copy.

// The first clone of a chain ending at clone `node` (clone <- permute ... <-
// clone), with the permutes in *permutes outermost last; -1 when `node` ends
// no such chain.
int chain_start(const PrimGraph& graph, const PrimNode& node, const std::vector<int>& readers,
                std::vector<int>* permutes) {
  if (node.prim != Prim::Clone || node.args.size() != 1 || !node.args[0].is_value()) return -1;
  int value = node.args[0].value;
  permutes->clear();
  for (;;) {
    const int made_by = graph.value(value).node;
    if (made_by < 0 || readers[value] != 1) return -1;
    const PrimNode& producer = graph.node(made_by);
    if (producer.prim == Prim::Clone) {
      if (permutes->empty()) return -1;  // a copy of a copy: nothing to undo
      std::reverse(permutes->begin(), permutes->end());
      return made_by;
    }
    if (producer.prim != Prim::Permute || producer.args.empty() || !producer.args[0].is_value()) return -1;
    permutes->push_back(made_by);
    value = producer.args[0].value;
  }
}

}  // namespace

bool drop_copies_undone_by_permutes(const PrimGraph& graph, PrimGraph* out) {
  const size_t node_count = graph.nodes().size();
  std::vector<int> readers(graph.values().size(), 0);
  for (const PrimNode& node : graph.nodes()) {
    for (int value : prims::node_reads(node)) ++readers[value];
  }
  // Alias classes holding a graph output (a result viewing x there would
  // make two outputs share storage that eager keeps apart), and what
  // externs may write: computed once a chain is found.
  std::vector<int> alias;
  std::vector<bool> output_class;
  std::vector<bool> writable;
  // Per second clone: its chain's first clone's input and permutes.
  std::vector<int> source(node_count, -1);
  std::vector<std::vector<int>> chain(node_count);
  bool any = false;
  for (size_t n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    std::vector<int> permutes;
    const int first = chain_start(graph, node, readers, &permutes);
    if (first < 0) continue;
    const PrimNode& copy = graph.node(first);
    if (copy.args.size() != 1 || !copy.args[0].is_value()) continue;
    const int x = copy.args[0].value;
    const int result = node.outputs[0];
    if (alias.empty()) {
      alias = prims::alias_class_of(graph);
      output_class.assign(graph.values().size(), false);
      for (int value : graph.outputs()) output_class[alias[value]] = true;
      writable = prims::writable_values(graph);
    }
    if (writable[x] || writable[result]) continue;
    if (output_class[alias[result]]) continue;
    // The permutes applied to x's layout must give the second copy's.
    graph::TensorMeta permuted = graph.value(x).meta;
    for (int p : permutes) {
      const std::vector<int64_t>& dims = graph.node(p).attrs.dims;
      if (dims.size() != permuted.sizes.size()) break;
      graph::TensorMeta next = permuted;
      for (size_t i = 0; i < dims.size(); ++i) {
        next.sizes[i] = permuted.sizes[dims[i]];
        next.strides[i] = permuted.strides[dims[i]];
      }
      permuted = std::move(next);
    }
    const graph::TensorMeta& want = graph.value(result).meta;
    if (permuted.sizes != want.sizes || permuted.strides != want.strides || permuted.dtype != want.dtype) continue;
    source[n] = x;
    chain[n] = std::move(permutes);
    any = true;
  }
  if (!any) return false;
  auto action = [&](size_t n) { return source[n] >= 0 ? NodeAction::Replace : NodeAction::Copy; };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    int value = map[source[n]];
    for (int p : chain[n]) value = b.permute(value, graph.node(p).attrs.dims);
    return value;
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
