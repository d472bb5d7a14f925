#include "inductor/lower_pointwise.h"

#include <algorithm>
#include <optional>
#include <set>

#include "inductor/simplify_casts.h"

namespace kiln::inductor {

using prims::PrimGraph;
using prims::PrimNode;

// Note [Pointwise fusion]
// Nodes are visited last to first. An elementwise node not yet in a group
// starts one; a node's operand joins its consumer's group when the operand
// is made by an elementwise node or a foldable view, is not a graph output,
// and every use of it is in that group (so no intermediate is needed
// outside and each group has one result). A group is one kernel that
// iterates over its result's sizes, recomputing broadcast intermediates per
// point (cheap for elementwise work; what inductor does too). Views whose
// index math is not a per-dim map (a view/reshape that splits or merges
// dims) fold only directly over a kernel input, where their own strides
// say where each element is; the node making their input is not absorbed.

std::vector<PointwiseGroup> find_pointwise_groups(const PrimGraph& graph) {
  const int node_count = static_cast<int>(graph.nodes().size());
  std::vector<std::vector<int>> users(graph.values().size());
  for (int n = 0; n < node_count; ++n) {
    for (const prims::PrimArg& arg : graph.node(n).args) {
      if (arg.is_value()) users[arg.value].push_back(n);
    }
  }
  std::set<int> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  std::vector<int> group_of(node_count, -1);
  int groups = 0;
  for (int n = node_count - 1; n >= 0; --n) {
    const PrimNode& node = graph.node(n);
    if (group_of[n] < 0) {
      if (!is_elementwise(graph, node)) continue;
      group_of[n] = groups++;
    }
    for (const prims::PrimArg& arg : node.args) {
      if (!arg.is_value()) continue;
      const int producer = graph.value(arg.value).node;
      if (producer < 0 || group_of[producer] >= 0 || graph_outputs.count(arg.value)) continue;
      const PrimNode& made_by = graph.node(producer);
      if (is_view_node(made_by) ? !view_folds(graph, made_by) : !is_elementwise(graph, made_by)) continue;
      const bool all_inside = std::all_of(users[arg.value].begin(), users[arg.value].end(),
                                          [&](int user) { return group_of[user] == group_of[n]; });
      if (!all_inside) continue;
      group_of[producer] = group_of[n];
    }
  }
  std::vector<PointwiseGroup> result(groups);
  for (int n = 0; n < node_count; ++n) {
    if (group_of[n] >= 0) result[group_of[n]].nodes.push_back(n);
  }
  // Numbered from the last node back; report them in graph order.
  std::sort(result.begin(), result.end(),
            [](const PointwiseGroup& a, const PointwiseGroup& b) { return a.nodes.back() < b.nodes.back(); });
  return result;
}

LoweredKernel lower_pointwise(const PrimGraph& graph, const PointwiseGroup& group) {
  if (group.nodes.empty()) throw LoweringError("an empty group");
  const int root = group.nodes.back();
  if (!is_elementwise(graph, graph.node(root))) {
    throw LoweringError(std::string("the group's result is made by ") + prims::prim_name(graph.node(root).prim) +
                        ", not an elementwise prim");
  }
  const int result = graph.node(root).outputs[0];
  const graph::TensorMeta& meta = graph.value(result).meta;
  LoweredKernel out;
  out.kernel.name = prims::prim_name(graph.node(root).prim);
  out.kernel.sizes = meta.sizes;
  ValueLowering lowering(graph, group.nodes, &out);
  const int value = lowering.emit(result, ValueLowering::identity(meta.sizes.size()));
  out.kernel.add_output(KernelOutput{meta.dtype, meta.strides, value, false, {}, {}});
  out.outputs.push_back(result);
  simplify_casts(out.kernel);
  const std::string problem = verify(out.kernel);
  if (!problem.empty()) throw LoweringError("lowered kernel is invalid: " + problem);
  return out;
}

}  // namespace kiln::inductor
