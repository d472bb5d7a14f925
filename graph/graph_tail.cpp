#include "graph/graph_tail.h"

#include <algorithm>

namespace kiln::graph {
namespace {

// Appends the node ids `arg` reads, depth-first.
void reads(const Arg& arg, std::vector<int>& ids) {
  if (arg.kind == Arg::Kind::Node) ids.push_back(arg.node);
  for (const Arg& item : arg.items) reads(item, ids);
}

// `arg` with its node refs taken through `map`.
Arg remapped(const Arg& arg, const std::vector<int>& map) {
  Arg out = arg;
  if (out.kind == Arg::Kind::Node) out.node = map[arg.node];
  for (size_t i = 0; i < out.items.size(); ++i) out.items[i] = remapped(arg.items[i], map);
  return out;
}

}  // namespace

GraphTail cut_tail(const Graph& source, int first, const std::vector<int>& placeholders, const Arg& output,
                   std::string* why) {
  GraphTail tail;
  const int size = static_cast<int>(source.nodes().size());
  std::vector<int> earlier;
  auto note = [&](const Arg& arg) {
    std::vector<int> ids;
    reads(arg, ids);
    for (int id : ids) {
      if (id < first && std::find(earlier.begin(), earlier.end(), id) == earlier.end()) earlier.push_back(id);
    }
  };
  for (int id = first; id < size; ++id) {
    const Node& node = source.node(id);
    if (node.kind != NodeKind::Call) {
      *why = "the backward reads a new input";
      return {};
    }
    if (!node.symbolic_sizes.empty() || !node.int_symbol.empty()) {
      *why = "the backward has symbolic sizes";
      return {};
    }
    if (node.autocast_implicit) {
      *why = "the backward computes under autocast";
      return {};
    }
    if (std::find(placeholders.begin(), placeholders.end(), id) != placeholders.end()) continue;
    for (const Arg& arg : node.args) note(arg);
    for (const auto& kw : node.kwargs) note(kw.second);
  }
  note(output);
  for (int id : earlier) {
    const Node& node = source.node(id);
    if (node.metas.size() != 1 || node.returns_tuple || !node.symbolic_sizes.empty()) {
      *why = "the backward reads %" + std::to_string(id) + ", which is not one tensor";
      return {};
    }
  }
  auto graph = std::make_unique<Graph>();
  std::vector<int> map(size, -1);
  for (int id : placeholders) {
    if (id < first || id >= size || source.node(id).metas.size() != 1) {
      *why = "a placeholder is not one tensor of the tail";
      return {};
    }
    map[id] = graph->add_input(-1, "grad_" + std::to_string(id), source.node(id).metas[0]);
  }
  for (int id : earlier) map[id] = graph->add_input(-1, "saved_" + std::to_string(id), source.node(id).metas[0]);
  for (int id = first; id < size; ++id) {
    if (map[id] >= 0) continue;  // a placeholder
    const Node& node = source.node(id);
    std::vector<Arg> args;
    for (const Arg& arg : node.args) args.push_back(remapped(arg, map));
    std::vector<std::pair<std::string, Arg>> kwargs;
    for (const auto& [name, arg] : node.kwargs) kwargs.emplace_back(name, remapped(arg, map));
    const int made = graph->add_call(node.target_name, node.target, std::move(args), std::move(kwargs));
    Node& copy = graph->node(made);
    copy.metas = node.metas;
    copy.returns_tuple = node.returns_tuple;
    copy.fresh_result = node.fresh_result;
    map[id] = made;
  }
  graph->set_output(remapped(output, map));
  tail.graph = std::move(graph);
  tail.outer = std::move(earlier);
  return tail;
}

}  // namespace kiln::graph
