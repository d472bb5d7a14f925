#include "prims/constant_subgraphs.h"

#include <algorithm>

#include "prims/common_meta.h"
#include "prims/extern_writes.h"
#include "prims/subgraph.h"

namespace kiln::prims {

// Note [Constant subgraphs]
// Code often builds tensors from sizes alone on every call: Swin's
// shifted-window attention fills a zeroed image mask with nine slice
// writes, cuts it into windows and turns it into an additive mask, five
// times a forward (45 `operator.setitem` calls, each a fill kernel on the
// GPU); models build causal masks from `torch.ones(...).tril()`. Such
// nodes read no graph input, so they compute the same values on every
// call. The compiled graph runs them once, at its first call, and keeps
// the values the rest of the graph reads; later calls pass the kept
// tensors as extra inputs of the rest (runtime/constant_inputs_executor).
// A node is constant when
//  - it is no random draw, and an extern only where kiln knows the call is
//    deterministic: kiln's own functional calls (extern_pure), and torch's
//    callables and `operator.setitem` whose names say they draw no random
//    numbers (prims::extern_draws_random), not a function the user allowed
//    in the graph;
//  - every value it reads is made by a constant node, and none it makes
//    needs a gradient (a leaf made with requires_grad=True is fresh per
//    call);
//  - no tensor sharing storage with its values (an alias class: views and
//    extern arguments) is written by a node that is not constant, or
//    written by a constant node after a node that is not constant read it
//    (running the constants first would show that reader the write), or
//    returned by the graph (a kept tensor must not reach the caller, who
//    could write it).
// Dropping a node from the constant set can drop its readers and its alias
// class, so the rules run to a fixed point. Kept are the constant values
// that other nodes read; a value that is only a factory's fill or arange,
// or a view of one, is not worth keeping (kernels compute it inline,
// keeping it would cost memory and a load), so the rest graph makes it
// itself. The cost is the kept tensors' memory for the compiled graph's
// lifetime (logged with the split under `prims`).

namespace {

// Externs known to compute the same result from the same arguments, with
// no effect but writes into their arguments: torch's callables and
// `operator.setitem` that draw no random numbers (a function the user
// allowed in the graph may do anything), a call returning nothing only
// when it writes a tensor argument (torch._C._set_grad_enabled changes
// global state).
bool deterministic_extern(const PrimNode& node) {
  const PrimAttrs& attrs = node.attrs;
  if (attrs.extern_pure) return true;
  const std::string& name = attrs.target_name;
  const bool torch_callable =
      name.starts_with("torch.") || name.starts_with("Tensor.") || name == "operator.setitem";
  return torch_callable && !extern_draws_random(attrs) && (!node.outputs.empty() || extern_writes_arguments(attrs));
}

// True for a node whose outputs are only a fill, an arange or a view of
// what it reads: not worth keeping on its own.
bool cheap_node(const PrimNode& node) {
  const Family family = prim_info(node.prim).family;
  return family == Family::Factory || family == Family::View;
}

}  // namespace

std::optional<ConstantSplit> split_constant_subgraphs(const PrimGraph& graph) {
  const int node_count = static_cast<int>(graph.nodes().size());
  const int value_count = static_cast<int>(graph.values().size());
  std::vector<std::vector<int>> reads(node_count);
  for (int n = 0; n < node_count; ++n) reads[n] = node_reads(graph.node(n));
  auto made_by_constant = [&](const std::vector<bool>& constant, int value) {
    const int node = graph.value(value).node;
    return node >= 0 && constant[node];
  };

  std::vector<bool> constant(node_count, false);
  bool any = false;
  for (int n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    const Family family = prim_info(node.prim).family;
    bool ok = family != Family::Random && (family != Family::Extern || deterministic_extern(node));
    for (int v : reads[n]) ok = ok && made_by_constant(constant, v);
    // A tensor made to need a gradient (torch.zeros(n, requires_grad=True))
    // is a fresh leaf per call.
    for (int v : node.outputs) ok = ok && !graph.value(v).meta.requires_grad;
    constant[n] = ok;
    any = any || ok;
  }
  if (!any) return std::nullopt;

  const std::vector<int> alias = alias_class_of(graph);
  std::vector<bool> returned_class(value_count, false);
  for (int id : graph.outputs()) returned_class[alias[id]] = true;
  for (bool changed = true; changed;) {
    changed = false;
    // Alias classes a constant node must not touch.
    std::vector<bool> tainted = returned_class;
    std::vector<bool> read_outside(value_count, false);  // read by a non-constant node so far
    for (int n = 0; n < node_count; ++n) {
      const PrimNode& node = graph.node(n);
      const bool writes = node.prim == Prim::Extern && !node.attrs.extern_pure;
      for (int v : reads[n]) {
        const int c = alias[v];
        if (!constant[n]) {
          if (writes) tainted[c] = true;
          read_outside[c] = true;
        } else if (writes && read_outside[c]) {
          tainted[c] = true;
        }
      }
    }
    for (int n = 0; n < node_count; ++n) {
      if (!constant[n]) continue;
      bool ok = true;
      for (int v : reads[n]) ok = ok && made_by_constant(constant, v) && !tainted[alias[v]];
      for (int v : graph.node(n).outputs) ok = ok && !tainted[alias[v]];
      if (!ok) {
        constant[n] = false;
        changed = true;
      }
    }
  }

  // Values worth keeping: computed from constants by more than a fill, an
  // arange and views, or in a class a constant extern writes (every extern
  // left reading a constant is a constant one).
  std::vector<bool> written_class(value_count, false);
  for (int n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    if (node.prim != Prim::Extern || node.attrs.extern_pure) continue;
    for (int v : reads[n]) written_class[alias[v]] = true;
  }
  std::vector<bool> worth(value_count, false);
  for (int n = 0; n < node_count; ++n) {
    if (!constant[n]) continue;
    const PrimNode& node = graph.node(n);
    bool w = !cheap_node(node);
    for (int v : reads[n]) w = w || worth[v];
    for (int v : node.outputs) w = w || written_class[alias[v]];
    for (int v : node.outputs) worth[v] = w;
  }
  ConstantSplit split;
  std::vector<bool> kept(value_count, false);
  for (int n = 0; n < node_count; ++n) {
    if (constant[n]) continue;
    for (int v : reads[n]) {
      if (made_by_constant(constant, v) && worth[v] && !kept[v]) {
        kept[v] = true;
        split.kept.push_back(v);
      }
    }
  }
  if (split.kept.empty()) return std::nullopt;
  std::sort(split.kept.begin(), split.kept.end());

  // The constants, run once: every constant node, then the dead ones
  // dropped (writes into kept tensors stay: externs with effects).
  PrimGraph constants;
  std::vector<int> map(value_count, -1);
  for (int n = 0; n < node_count; ++n) {
    if (constant[n]) copy_node_mapped(constants, graph, graph.node(n), map);
  }
  std::vector<int> constant_outputs;
  for (int v : split.kept) {
    constant_outputs.push_back(map[v]);
    split.kept_bytes += value_bytes(graph.value(v).meta);
  }
  constants.set_outputs(std::move(constant_outputs));
  if (PrimGraph live; drop_dead_nodes(constants, &live)) constants = std::move(live);
  split.constants = std::move(constants);

  // The rest: the graph's inputs and the kept values as inputs; its other
  // nodes, and copies of the cheap constant ones it reads (dead ones
  // dropped).
  PrimGraph rest;
  map = copy_inputs(rest, graph);
  for (int v : split.kept) map[v] = rest.add_input(graph.value(v).meta);
  for (int n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    const bool made_here = !constant[n] || (cheap_node(node) && std::none_of(node.outputs.begin(), node.outputs.end(),
                                                                            [&](int v) { return worth[v]; }));
    if (made_here) copy_node_mapped(rest, graph, node, map);
  }
  copy_outputs(rest, graph, map);
  if (PrimGraph live; drop_dead_nodes(rest, &live)) rest = std::move(live);
  split.folded_nodes = node_count - static_cast<int>(rest.nodes().size());
  split.rest = std::move(rest);
  return split;
}

}  // namespace kiln::prims
