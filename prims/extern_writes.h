// Which prim nodes must keep their order beyond their data edges: an
// extern call may write any tensor its arguments share storage with (Note
// [Extern writes] in extern_writes.cpp). The fusion scheduler and every
// pass that reorders nodes obey these orderings.
#pragma once

#include <utility>
#include <vector>

#include "prims/prim_graph.h"

namespace kiln::prims {

// The values a node reads: its tensor arguments and, for an extern, the
// values in its torch call's arguments.
std::vector<int> node_reads(const PrimNode& node);

// Orderings beyond the data edges: (before, after) node pairs that must run
// in that order because an extern call may write a tensor both read.
std::vector<std::pair<int, int>> extern_order_edges(const PrimGraph& graph);

// Per value: whether an extern call not marked pure may write it (it shares
// an alias class with one of the call's arguments).
std::vector<bool> writable_values(const PrimGraph& graph);

}  // namespace kiln::prims
