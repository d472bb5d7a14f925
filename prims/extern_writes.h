// Which prim nodes must keep their order beyond their data edges: an
// extern call may write any tensor its arguments share storage with (Note
// [Extern writes] in extern_writes.cpp). The fusion scheduler and every
// pass that reorders nodes obey these orderings.
#pragma once

#include <string>
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

// Why running an extern call again would not reproduce its first run, or
// "": "it writes into its arguments" (setitem, in-place Tensor methods,
// out=, inplace=True) or "it draws random numbers". Judged by torch's
// spelling of the callable's name.
std::string extern_effect(const PrimAttrs& attrs);

// True for an extern call that writes into its arguments (see extern_effect).
bool extern_writes_arguments(const PrimAttrs& attrs);

// True for an extern call that draws from torch's generator, in place or
// not (bernoulli_, dropout, randn_like, ...).
bool extern_draws_random(const PrimAttrs& attrs);

// Per value: a representative value of its alias class (views share one
// with their input, an extern not marked pure with its arguments), so two
// values may share storage only where their representatives are equal.
std::vector<int> alias_class_of(const PrimGraph& graph);

}  // namespace kiln::prims
