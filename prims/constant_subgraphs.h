// The part of a prim graph that reads none of its inputs: computed once,
// when the compiled graph first runs, and kept (Note [Constant subgraphs]
// in constant_subgraphs.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "prims/prim_graph.h"

namespace kiln::prims {

// A graph split into what it computes from constants alone and the rest.
struct ConstantSplit {
  // No inputs; returns the kept values, in `kept` order.
  PrimGraph constants;
  // The graph's inputs, then one input per kept value; the graph's outputs,
  // in order.
  PrimGraph rest;
  std::vector<int> kept;   // the kept values' ids in the original graph
  int64_t kept_bytes = 0;  // their bytes together
  int folded_nodes = 0;    // nodes fewer in the rest than in the graph
};

// The split of `graph`, or nullopt when no value worth keeping reads no
// input: only a lone factory (a fill or an arange kernels compute inline)
// and views of it would be kept, or nothing at all.
std::optional<ConstantSplit> split_constant_subgraphs(const PrimGraph& graph);

}  // namespace kiln::prims
