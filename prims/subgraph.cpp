#include "prims/subgraph.h"

#include <algorithm>
#include <string>
#include <utility>

#include "prims/extern_writes.h"

namespace kiln::prims {
namespace {

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
    into.mark_checkpoint(made[i], from.value(node.outputs[i]).checkpoint);
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
    reads = node_reads(node);
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

// Note [Late recomputation]
// The partitioner's backward graph keeps the joint graph's order, where
// forward nodes come first: every value the backward recomputes from saved
// ones (a batch norm's normalized input, a ReLU's mask) was made at its
// start and lived until its one use, layers later. A conv net's backward
// held all its layers' recomputed tensors at once (H100, 8 conv-BN-ReLU
// layers: 658 MiB against eager's 248). Moving each recomputed node to just
// before its first reader keeps one layer's worth alive. Extern writes
// still order nodes (Note [Extern writes]): a late node an extern must
// precede is emitted before the extern.
bool sink_to_first_use(const PrimGraph& graph, const std::vector<bool>& late, PrimGraph* out) {
  const int count = static_cast<int>(graph.nodes().size());
  std::vector<std::vector<int>> must_precede(count);  // late nodes that must run before node n
  for (const auto& [before, after] : extern_order_edges(graph)) {
    if (late[before]) must_precede[after].push_back(before);
  }
  std::vector<int> order;
  std::vector<bool> placed(count, false);
  // Places n after its unplaced late producers (iteratively: chains run
  // hundreds of nodes deep).
  auto place = [&](int root) {
    std::vector<std::pair<int, bool>> stack{{root, false}};
    while (!stack.empty()) {
      auto [n, expanded] = stack.back();
      stack.pop_back();
      if (placed[n]) continue;
      if (expanded) {
        placed[n] = true;
        order.push_back(n);
        continue;
      }
      stack.push_back({n, true});
      std::vector<int> first;
      for (int v : node_reads(graph.node(n))) {
        const int producer = graph.value(v).node;
        if (producer >= 0 && !placed[producer]) first.push_back(producer);
      }
      for (int p : must_precede[n]) {
        if (!placed[p]) first.push_back(p);
      }
      // Pushed in reverse so that producers are placed in graph order.
      std::sort(first.begin(), first.end());
      for (auto it = first.rbegin(); it != first.rend(); ++it) stack.push_back({*it, false});
    }
  };
  for (int n = 0; n < count; ++n) {
    if (!late[n]) place(n);
  }
  for (int v : graph.outputs()) {
    if (graph.value(v).node >= 0) place(graph.value(v).node);
  }
  for (int n = 0; n < count; ++n) place(n);  // late nodes nothing reads
  bool moved = false;
  for (int i = 0; i < count; ++i) moved = moved || order[i] != i;
  if (!moved) return false;
  PrimGraph sunk;
  std::vector<int> map = copy_inputs(sunk, graph);
  for (int n : order) copy_node_mapped(sunk, graph, graph.node(n), map);
  copy_outputs(sunk, graph, map);
  *out = std::move(sunk);
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
    reads = node_reads(node);
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
