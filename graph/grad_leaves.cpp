#include "graph/grad_leaves.h"

#include <vector>

namespace kiln::graph {

// Note [Grad leaves made in a graph]
// `t.requires_grad_()` (or `t.requires_grad = True`, Note [Assignments to
// requires_grad] in tracer/) on a tensor without history makes t a new
// autograd leaf: gradients stop there as at any leaf and accumulate in
// t.grad, which only code holding t can read. transformers' wav2vec2
// feature encoder does it to a view of its input in training, for gradient
// checkpointing's sake, and its weights make every later value require
// grad anyway. kiln's autograd differentiates with respect to graph inputs,
// so it differentiates such a graph as if the call were not there. That
// changes nothing observable when (1) the graph returns neither the leaf
// nor its argument (the same Python object), so no caller can read .grad,
// and (2) every output torch makes require grad also reaches a graph input
// that requires grad, so the outputs of kiln's autograd Function require
// grad exactly where torch's would. Otherwise the graph runs through torch
// (interpreter/graph_executors.cpp, grad_leaf_maker).

namespace {

bool is_grad_leaf_call(const Node& node) {
  return node.kind == NodeKind::Call && node.target_name == "Tensor.requires_grad_" && !node.args.empty() &&
         node.args[0].kind == Arg::Kind::Node;
}

bool any_requires_grad(const Node& node) {
  for (const TensorMeta& meta : node.metas) {
    if (meta.requires_grad) return true;
  }
  return false;
}

bool reads_carrier(const Arg& arg, const std::vector<char>& carries) {
  if (arg.kind == Arg::Kind::Node) return carries[arg.node] != 0;
  for (const Arg& item : arg.items) {
    if (reads_carrier(item, carries)) return true;
  }
  return false;
}

void collect_nodes(const Arg& arg, std::vector<int>* ids) {
  if (arg.kind == Arg::Kind::Node) ids->push_back(arg.node);
  for (const Arg& item : arg.items) collect_nodes(item, ids);
}

}  // namespace

bool is_unobservable_grad_leaf(const Graph& graph, const Node& node) {
  if (!is_grad_leaf_call(node) || any_requires_grad(graph.node(node.args[0].node))) return false;
  std::vector<int> outputs;
  collect_nodes(graph.output(), &outputs);
  for (int id : outputs) {
    if (id == node.id || id == node.args[0].node) return false;
  }
  // Which values carry gradients from the graph's inputs, no leaf made
  // inside counted.
  std::vector<char> carries(graph.nodes().size(), 0);
  for (const Node& n : graph.nodes()) {
    if (n.kind == NodeKind::Input) {
      carries[n.id] = any_requires_grad(n);
      continue;
    }
    if (is_grad_leaf_call(n) || !any_requires_grad(n)) continue;
    bool reads = false;
    for (const Arg& arg : n.args) reads = reads || reads_carrier(arg, carries);
    for (const auto& [name, arg] : n.kwargs) reads = reads || reads_carrier(arg, carries);
    carries[n.id] = reads;
  }
  for (int id : outputs) {
    if (any_requires_grad(graph.node(id)) && !carries[id]) return false;
  }
  return true;
}

}  // namespace kiln::graph
