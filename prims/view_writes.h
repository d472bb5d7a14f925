// In-place writes through views of a tensor the graph made, carried back to
// the tensor and its other views as new values (Note [Writes through views]
// in view_writes.cpp), so functionalization covers them.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "prims/prim_builder.h"
#include "prims/prim_graph.h"

namespace kiln::prims {

// Where a write into a view lands: the base value whose storage the view
// shares, the views from it to the written one, and every value sharing
// that storage.
struct ViewWrite {
  int base = -1;
  std::vector<int> chain;  // view values, base's child first, the written view last (empty: base written)
  std::set<int> members;   // values sharing base's storage, base included
};

// The plan for an in-place write into `written` (a view of a tensor the
// graph made, or such a tensor with views of it), or nullopt with
// `why` when the write cannot be carried to a new base value.
std::optional<ViewWrite> plan_view_write(const PrimGraph& graph, int written, std::string* why);

// Carries the written view's new value `updated` back to a new base and
// returns, for each old value of plan.members that `wanted` names, its new
// value: the base, the chain and other views of the base made again from
// the new base.
std::map<int, int> carry_view_write(PrimBuilder& b, const ViewWrite& plan, int updated, const std::set<int>& wanted);

}  // namespace kiln::prims
