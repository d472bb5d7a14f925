#include "prims/subgraph.h"

#include <string>

namespace kiln::prims {
namespace {

// Value ids a node reads (prim arguments and extern arguments).
void node_reads(const PrimNode& node, std::vector<int>* out) {
  for (const PrimArg& arg : node.args) {
    if (arg.is_value()) out->push_back(arg.value);
  }
  struct Walk {
    static void arg(const graph::Arg& a, std::vector<int>* out) {
      if (a.kind == graph::Arg::Kind::Node) out->push_back(a.node);
      for (const graph::Arg& item : a.items) arg(item, out);
    }
  };
  for (const graph::Arg& a : node.attrs.extern_args) Walk::arg(a, out);
  for (const auto& kw : node.attrs.extern_kwargs) Walk::arg(kw.second, out);
}

// Rewrites value ids in an extern argument.
void remap_arg(graph::Arg& a, const std::vector<int>& map) {
  if (a.kind == graph::Arg::Kind::Node) a.node = map[a.node];
  for (graph::Arg& item : a.items) remap_arg(item, map);
}

}  // namespace

std::vector<int> copy_node(PrimGraph& into, const PrimGraph& from, const PrimNode& node,
                           const std::vector<int>& map) {
  std::vector<PrimArg> args = node.args;
  for (PrimArg& arg : args) {
    if (arg.is_value()) arg.value = map[arg.value];
  }
  PrimAttrs attrs = node.attrs;
  for (graph::Arg& a : attrs.extern_args) remap_arg(a, map);
  for (auto& kw : attrs.extern_kwargs) remap_arg(kw.second, map);
  std::vector<graph::TensorMeta> metas;
  for (int id : node.outputs) metas.push_back(from.value(id).meta);
  std::vector<int> made = into.add_node(node.prim, std::move(args), std::move(attrs), metas);
  for (size_t i = 0; i < made.size(); ++i) {
    if (from.value(node.outputs[i]).grad_stopped) into.stop_grad(made[i]);
  }
  return made;
}

std::vector<int> copy_inputs(PrimGraph& into, const PrimGraph& from) {
  std::vector<int> map(from.values().size(), -1);
  for (int id : from.inputs()) map[id] = into.add_input(from.value(id).meta);
  return map;
}

void copy_node_mapped(PrimGraph& into, const PrimGraph& from, const PrimNode& node, std::vector<int>& map) {
  const std::vector<int> made = copy_node(into, from, node, map);
  for (size_t i = 0; i < made.size(); ++i) map[node.outputs[i]] = made[i];
}

void copy_outputs(PrimGraph& into, const PrimGraph& from, const std::vector<int>& map) {
  std::vector<int> outputs;
  for (int id : from.outputs()) outputs.push_back(map[id]);
  into.set_outputs(std::move(outputs));
}

std::vector<bool> live_values(const PrimGraph& graph, const std::vector<int>& outputs) {
  std::vector<bool> live(graph.values().size(), false);
  for (int id : outputs) live[id] = true;
  std::vector<int> reads;
  for (size_t n = graph.nodes().size(); n-- > 0;) {
    const PrimNode& node = graph.node(static_cast<int>(n));
    bool needed = false;
    for (int id : node.outputs) needed = needed || live[id];
    if (!needed) continue;
    reads.clear();
    node_reads(node, &reads);
    for (int id : reads) live[id] = true;
  }
  return live;
}

bool drop_dead_nodes(const PrimGraph& graph, PrimGraph* out) {
  std::vector<int> roots;
  for (int n = 0; n < static_cast<int>(graph.nodes().size()); ++n) {
    const PrimNode& node = graph.node(n);
    if ((node.prim == Prim::Extern && !node.attrs.extern_pure) || prim_info(node.prim).family == Family::Random) {
      roots.push_back(n);
    }
  }
  std::string error;
  PrimGraph pruned = extract_subgraph(graph, graph.inputs(), graph.outputs(), &error, roots);
  if (!error.empty() || pruned.nodes().size() == graph.nodes().size()) return false;
  *out = std::move(pruned);
  return true;
}

PrimGraph extract_subgraph(const PrimGraph& graph, const std::vector<int>& inputs,
                           const std::vector<int>& outputs, std::string* error,
                           const std::vector<int>& roots) {
  error->clear();
  const size_t count = graph.values().size();
  // Which values the outputs need, stopping at the given inputs.
  std::vector<bool> is_input(count, false);
  for (int id : inputs) is_input[id] = true;
  std::vector<bool> needed(count, false);
  for (int id : outputs) needed[id] = true;
  std::vector<bool> node_needed(graph.nodes().size(), false);
  std::vector<bool> is_root(graph.nodes().size(), false);
  for (int n : roots) is_root[n] = true;
  std::vector<int> reads;
  for (size_t n = graph.nodes().size(); n-- > 0;) {
    const PrimNode& node = graph.node(static_cast<int>(n));
    bool want = is_root[n];
    for (int id : node.outputs) want = want || (needed[id] && !is_input[id]);
    if (!want) continue;
    node_needed[n] = true;
    reads.clear();
    node_reads(node, &reads);
    for (int id : reads) needed[id] = true;
  }
  PrimGraph out;
  std::vector<int> map(count, -1);
  for (int id : inputs) map[id] = out.add_input(graph.value(id).meta);
  for (int id : graph.inputs()) {
    if (needed[id] && !is_input[id]) {
      *error = "the outputs need graph input %" + std::to_string(id) + ", which is not among the inputs";
      return out;
    }
  }
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    if (!node_needed[n]) continue;
    const PrimNode& node = graph.node(static_cast<int>(n));
    const std::vector<int> made = copy_node(out, graph, node, map);
    for (size_t i = 0; i < made.size(); ++i) {
      // An output also listed as an input keeps the input.
      if (map[node.outputs[i]] < 0) map[node.outputs[i]] = made[i];
    }
  }
  std::vector<int> mapped;
  for (int id : outputs) mapped.push_back(map[id]);
  out.set_outputs(std::move(mapped));
  return out;
}

}  // namespace kiln::prims
