// Carving prim graphs: the part of a graph that computes some values from
// others. Dead-code elimination and the autograd partitioner are both this.
#pragma once

#include <vector>

#include "prims/prim_graph.h"

namespace kiln::prims {

// A new graph whose inputs are `inputs` and whose outputs are `outputs`
// (value ids of `graph`), holding exactly the nodes of `graph` needed to
// compute the outputs from the inputs, in their original order. Returns an
// empty optional-like result through `error` when an output depends on a
// graph input not listed in `inputs` ("" on success). Nodes listed in
// `roots` are kept even though no output needs them (calls run for their
// effects, such as writes into a tensor).
PrimGraph extract_subgraph(const PrimGraph& graph, const std::vector<int>& inputs,
                           const std::vector<int>& outputs, std::string* error,
                           const std::vector<int>& roots = {});

// `graph` without the nodes whose results nothing reads (no other node,
// no graph output), keeping calls with effects (externs not marked pure,
// random draws, which advance torch's generator). False, and *out
// untouched, when every node is needed. Same inputs and outputs, in order.
bool drop_dead_nodes(const PrimGraph& graph, PrimGraph* out);

// Appends to `into` a copy of `node` (a node of `from`), its argument value
// ids read through `map` (from's ids to into's), its outputs keeping their
// metadata and grad_stopped marks. Returns the new output ids, in order.
std::vector<int> copy_node(PrimGraph& into, const PrimGraph& from, const PrimNode& node,
                           const std::vector<int>& map);

// The three steps of a pass that rebuilds a graph node by node: `into`
// gets `from`'s inputs (the returned map takes from's value ids to
// into's, -1 where not yet made); copy_node_mapped copies a node and
// records its outputs in the map; copy_outputs sets into's outputs to the
// images of from's.
std::vector<int> copy_inputs(PrimGraph& into, const PrimGraph& from);
void copy_node_mapped(PrimGraph& into, const PrimGraph& from, const PrimNode& node, std::vector<int>& map);
void copy_outputs(PrimGraph& into, const PrimGraph& from, const std::vector<int>& map);

// `graph` with each node flagged in `late` moved down to just before its
// first reader (or to the end, for graph outputs), its own late producers
// pulled along; other nodes keep their order, and extern writes keep
// theirs (Note [Late recomputation] in subgraph.cpp). Same inputs and
// outputs. False, and *out untouched, when no node moves.
bool sink_to_first_use(const PrimGraph& graph, const std::vector<bool>& late, PrimGraph* out);

// The values of `graph` the given outputs depend on (all of them when a
// value is needed), as a per-value flag.
std::vector<bool> live_values(const PrimGraph& graph, const std::vector<int>& outputs);

}  // namespace kiln::prims
