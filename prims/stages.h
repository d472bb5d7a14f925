// Cutting a prim graph into stages that run one after another, each a
// graph of its own: how a compiled backward hands gradients over in
// buckets while it is still running (Note [Gradient buckets] in
// stages.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "prims/prim_graph.h"

namespace kiln::prims {

// One stage of a cut graph.
struct Stage {
  PrimGraph graph;
  std::vector<int> inputs;   // per stage input: its value id in the whole graph
  std::vector<int> outputs;  // per stage output: its value id in the whole graph
};

// Node positions (ascending, each the first node of a stage) where `graph`
// is cut so that each stage's backward completes about `bucket_bytes` of
// the gradients of the inputs flagged in `wants_grad`. Empty when one stage
// would hold them all.
std::vector<int> gradient_bucket_cuts(const PrimGraph& graph, const std::vector<bool>& wants_grad,
                                      int64_t bucket_bytes);

// `graph` cut before each node position in `cuts` (ascending): stage k runs
// the nodes from cuts[k-1] up to cuts[k], takes the values it reads that
// the graph's inputs or earlier stages make, and returns those it makes
// that later stages read or the graph returns.
std::vector<Stage> split_stages(const PrimGraph& graph, const std::vector<int>& cuts);

}  // namespace kiln::prims
