// The copy loop the prim graph rewrites before kernel planning share
// (view_pairs, sink_views, conv_bias, bias_epilogues): every node copied,
// dropped or replaced, the graph's inputs and outputs kept.
#pragma once

#include <functional>
#include <vector>

#include "prims/prim_builder.h"
#include "prims/prim_graph.h"

namespace kiln::inductor {

// What a rewrite does with one node of the graph it copies.
enum class NodeAction {
  Copy,     // as it is
  Drop,     // nothing in the new graph reads it
  Replace,  // by what `replace` builds
};

// Builds node n's replacement in the new graph through `b`, reading the
// old graph's values through `map`; returns the new value standing for
// the node's one output, or -1 to give the rewrite up.
using NodeReplacement = std::function<int(prims::PrimBuilder& b, size_t n, const std::vector<int>& map)>;

// `graph` copied into *out node by node as `action(n)` says, with the same
// inputs and outputs; false (and *out untouched) when a replacement gives
// up or the meta rules refuse one (a PrimError).
bool rewrite_nodes(const prims::PrimGraph& graph, const std::function<NodeAction(size_t n)>& action,
                   const NodeReplacement& replace, prims::PrimGraph* out);

}  // namespace kiln::inductor
