#include "autograd/partitioner.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <stdexcept>

#include "autograd/derivatives.h"
#include "prims/common_meta.h"
#include "prims/extern_writes.h"
#include "prims/subgraph.h"

namespace kiln::autograd {

// Note [Partitioning]
// A value of the joint graph is *forward-computable* when it depends only
// on the forward's inputs (never on an incoming gradient). The backward
// needs some of them: those its nodes read, and input gradients that are
// themselves forward-computable (zeros for floor). Each needed value is
// either saved by the forward, or recomputed in the backward from saved
// values. As in AOT autograd's partitioner, the choice is a minimum s-t cut:
// every forward-computable value v is an edge v_in -> v_out costing its
// bytes; data flows u_out -> v_in; the source feeds the forward's inputs and
// every value that must not be recomputed (matmul, reductions, index ops,
// random draws, externs: expensive, or not repeatable); needed values feed
// the sink. The cut edges are the saved values; what lies past the cut is
// recomputed by the backward, which extract_subgraph pulls in on its own.

namespace {

constexpr int64_t kInfinity = std::numeric_limits<int64_t>::max() / 4;

// Dinic's maximum flow, enough for graphs of a few thousand values.
class MaxFlow {
 public:
  explicit MaxFlow(int nodes) : adjacency_(nodes), level_(nodes), next_(nodes) {}

  void add_edge(int from, int to, int64_t capacity) {
    adjacency_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, capacity});
    adjacency_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
  }

  int64_t run(int source, int sink) {
    int64_t total = 0;
    while (levels(source, sink)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (int64_t pushed = push(source, sink, kInfinity)) total += pushed;
    }
    return total;
  }

  // Nodes reachable from `source` in the residual graph (after run()).
  std::vector<bool> source_side(int source) const {
    std::vector<bool> seen(adjacency_.size(), false);
    std::vector<int> stack{source};
    seen[source] = true;
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      for (int e : adjacency_[n]) {
        if (edges_[e].capacity > 0 && !seen[edges_[e].to]) {
          seen[edges_[e].to] = true;
          stack.push_back(edges_[e].to);
        }
      }
    }
    return seen;
  }

 private:
  struct Edge {
    int to;
    int64_t capacity;
  };

  bool levels(int source, int sink) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> queue;
    level_[source] = 0;
    queue.push(source);
    while (!queue.empty()) {
      const int n = queue.front();
      queue.pop();
      for (int e : adjacency_[n]) {
        if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[n] + 1;
          queue.push(edges_[e].to);
        }
      }
    }
    return level_[sink] >= 0;
  }

  int64_t push(int n, int sink, int64_t limit) {
    if (n == sink) return limit;
    for (size_t& i = next_[n]; i < adjacency_[n].size(); ++i) {
      const int e = adjacency_[n][i];
      Edge& edge = edges_[e];
      if (edge.capacity <= 0 || level_[edge.to] != level_[n] + 1) continue;
      if (int64_t pushed = push(edge.to, sink, std::min(limit, edge.capacity))) {
        edge.capacity -= pushed;
        edges_[e ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }

  std::vector<Edge> edges_;
  std::vector<std::vector<int>> adjacency_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

// Prims the backward may compute again from saved values: cheap, and the
// same every time.
bool recomputable(prims::Prim prim) {
  switch (prims::prim_info(prim).family) {
    case prims::Family::Unary:
    case prims::Family::Binary:
    case prims::Family::Ternary:
    case prims::Family::Convert:
    case prims::Family::View:
      return true;
    case prims::Family::Factory:
      return prim == prims::Prim::Full || prim == prims::Prim::Iota;
    default:
      return false;  // reductions, matmul, cat, index ops, random draws, externs
  }
}

// Note [Writes in the joint graph]
// An extern that writes into a tensor (setitem, an in-place method on a
// view, out=) changes what every value sharing that storage holds from then
// on. Recomputing such a value in the backward, or a value computed from
// one before the last write, would read the storage as the forward left
// it, not as it was when the forward read it (zeros_like then w[0] = 3:
// recomputing the zeros loses the 3). So every value that may share
// storage with a written one (joined through views and extern calls) is
// pinned to the forward, and so is every value a node computes from one of
// them before the storage's last write. A node reading it after the last
// write reads what the saved storage holds for good: its results may be
// recomputed (Swin builds its shifted-window mask by setitem; pinning all
// that was computed from the mask kept every later activation of the block
// for the backward, 2.3x torch.compile's peak memory). What such a pinned
// value feeds needs no pin: it is recomputed from the saved value. The
// writes themselves run in the forward, in their place, even when they
// return nothing.
std::vector<bool> values_near_writes(const prims::PrimGraph& g) {
  const int count = static_cast<int>(g.values().size());
  std::vector<int> parent(count);
  for (int v = 0; v < count; ++v) parent[v] = v;
  auto find = [&](int v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  };
  std::vector<std::pair<int, int>> writes;  // (node index, written value)
  const int node_count = static_cast<int>(g.nodes().size());
  for (int n = 0; n < node_count; ++n) {
    const prims::PrimNode& node = g.nodes()[n];
    const bool view = prims::prim_info(node.prim).family == prims::Family::View;
    const bool call = node.prim == prims::Prim::Extern;
    if (!view && !call) continue;
    const std::vector<int> reads = prims::node_reads(node);
    for (int r : reads) {
      for (int out : node.outputs) parent[find(out)] = find(r);
    }
    if (call && prims::extern_writes_arguments(node.attrs)) {
      for (int r : reads) writes.emplace_back(n, r);
    }
  }
  std::vector<bool> shared(count, false);
  if (writes.empty()) return shared;
  std::vector<int> last_write(count, -1);  // per class root
  for (const auto& [n, v] : writes) last_write[find(v)] = std::max(last_write[find(v)], n);
  for (int v = 0; v < count; ++v) shared[v] = last_write[find(v)] >= 0;
  std::vector<bool> pinned = shared;
  for (int n = 0; n < node_count; ++n) {
    const prims::PrimNode& node = g.nodes()[n];
    bool reads_early = false;
    for (int r : prims::node_reads(node)) reads_early = reads_early || (shared[r] && n < last_write[find(r)]);
    if (reads_early) {
      for (int out : node.outputs) pinned[out] = true;
    }
  }
  return pinned;
}

// Note [Checkpointed regions]
// Values made inside torch.utils.checkpoint's function carry the call's id
// (PrimValue::checkpoint; Note [Traced checkpoints] in tracer/
// trace_checkpoint.cpp). Eagerly none of those the function alone reads is
// kept for the backward: the backward runs the function again. So such an
// *internal* value may not be saved (its edge costs infinity: the cut
// passes through the region's inputs and results, or values before them)
// and the backward recomputes it, matmuls and reductions included. A
// region's results are pinned to the forward, as eagerly the function's
// results are its caller's values: recomputing them would pull the
// recomputation of one region into every later one (a stack of checkpointed
// blocks recomputed wholly from the model's input, each block's values
// alive from the start of the backward). What cannot be made again stays
// pinned too, and saved: random draws (eager's
// preserve_rng_state draws the same numbers again; keeping them gives the
// same numbers), externs not marked pure, values near writes. The backward
// makes each recomputed value just before its first use, so a region's
// values live while its own gradients are computed, not from the start of
// the backward.

// A forward node computing `prim` that the backward may run again when it
// lies in a checkpointed region.
bool recomputable_in_region(const prims::PrimNode& node) {
  const prims::Family family = prims::prim_info(node.prim).family;
  if (family == prims::Family::Random) return false;
  if (family == prims::Family::Extern) return node.attrs.extern_pure;
  return true;
}

// Per value of the joint graph: made by a forward node inside a
// checkpointed region and read by no forward node outside it, nor returned;
// or made by a backward node from such values of one region and the
// forward's inputs alone (the transposed bf16 weight a matmul's input
// gradient reads: saved, it kept a cast weight per layer that eager
// checkpointing makes again).
std::vector<bool> internal_to_regions(const JointGraph& joint) {
  const prims::PrimGraph& g = joint.graph;
  std::vector<bool> internal(g.values().size(), false);
  std::vector<int> region(g.values().size(), -1);
  for (int n = 0; n < joint.forward_node_count; ++n) {
    for (int id : g.node(n).outputs) {
      region[id] = g.value(id).checkpoint;
      internal[id] = region[id] >= 0;
    }
  }
  for (int n = 0; n < joint.forward_node_count; ++n) {
    const prims::PrimNode& node = g.node(n);
    const int made_in = node.outputs.empty() ? -1 : region[node.outputs[0]];
    for (int id : prims::node_reads(node)) {
      if (region[id] != made_in) internal[id] = false;
    }
  }
  for (int id : joint.forward_outputs) internal[id] = false;
  std::vector<bool> forward_input(g.values().size(), false);
  for (int i = 0; i < joint.forward_input_count; ++i) forward_input[g.inputs()[i]] = true;
  for (int n = joint.forward_node_count; n < static_cast<int>(g.nodes().size()); ++n) {
    const prims::PrimNode& node = g.node(n);
    int made_in = -1;
    bool inside = !node.outputs.empty();
    for (int id : prims::node_reads(node)) {
      if (forward_input[id]) continue;
      inside = inside && internal[id] && (made_in < 0 || region[id] == made_in);
      made_in = region[id];
    }
    if (!inside || made_in < 0) continue;
    for (int id : node.outputs) {
      internal[id] = true;
      region[id] = made_in;
    }
  }
  return internal;
}

// Note [Long recomputation chains]
// The min-cut counts bytes only. Through a transformer's residual stream
// everything between two layers' matmuls is elementwise (the residual add,
// layer norm's normalization from its saved mean and variance, the cast),
// so it found it cheapest to save each layer's small pieces and recompute
// the whole stream: BERT's backward began by recomputing all 24 layer
// norms in one kernel (640 lines on the CPU, 121 KB of CUDA source that
// NVRTC compiled for 2.9 s of a cold first call on the H100) and kept ~90
// full-size results alive from the start of the backward, each layer's
// backward needing the value at the end of the chain. A recomputed value may
// therefore depend on a chain of at most kMaxRecomputeChain recomputed
// elementwise nodes (views are free and not counted); a value deeper than
// that is pinned to the forward (the cut then saves it or a value after
// it), which restarts the count. AOT autograd bans recomputing long
// fusible chains for the same reason. Values inside checkpointed regions
// are left alone (Note [Checkpointed regions]: they are never saved).
constexpr int kMaxRecomputeChain = 16;

// Note [Saved views]
// A view costs the bytes of what it views, so the cut is indifferent
// between saving a matmul's output and saving the head-split view of it
// attention read, and max-flow's cut nearest the source picked the base:
// the backward then made the same views again, each an executor step (a
// BERT backward: 36 reshape-and-permute pairs for attention's saved
// query, key and value, 39 reshapes of saved layer-norm outputs for the
// matmuls that read them flattened). A view's edge therefore costs one
// byte less per view between it and the nearest value that is no view,
// which breaks such ties toward the view the backward reads; where the
// backward needs several views of one value, their sum still exceeds the
// base's and the base is saved. Only views the forward makes anyway (a
// value it must compute reads them) and the backward reads as they are get
// the discount: a view only the backward reads (a matmul operand's
// transpose for its weight gradient) would move to the forward as a step of
// its own, and one the backward reads only to undo it (the transposed
// weight a linear layer multiplies by, which its input gradient transposes
// back: Note [View pairs] folds that pair to the weight) would leave the
// backward a view of a saved value that no longer folds. Nor do views
// whose backward readers are all elementwise or reductions: their kernels
// index the view's base, so the backward makes nothing again, while a
// saved view is a forward step of its own (batch norm's weight reshaped
// to [1, C, 1, 1]: 34 reshape steps in a MobileNetV3-small forward). A
// saved view shares its base's storage.

// Views that fold with the view they read (Note [View pairs]).
bool view_pair(prims::Prim outer, prims::Prim inner) {
  auto reshape_like = [](prims::Prim p) { return p == prims::Prim::Reshape || p == prims::Prim::View; };
  return (outer == prims::Prim::Permute && inner == prims::Prim::Permute) || (reshape_like(outer) && reshape_like(inner));
}

// True for prims a kernel computes: a view they read is indexed by the
// kernel, never made as a step of its own.
bool kernel_reader(prims::Prim prim) {
  switch (prims::prim_info(prim).family) {
    case prims::Family::Unary:
    case prims::Family::Binary:
    case prims::Family::Ternary:
    case prims::Family::Convert:
    case prims::Family::Reduction: return true;
    default: return false;
  }
}

// Per value, the views between it and the nearest non-view value it views
// where Note [Saved views] discounts it, else 0.
std::vector<int> saved_view_discounts(const prims::PrimGraph& g, const std::vector<bool>& pinned,
                                      const std::vector<int>& forward_outputs) {
  const int count = static_cast<int>(g.values().size());
  std::vector<bool> in_forward(count, false);
  for (int id : forward_outputs) in_forward[id] = true;
  std::vector<bool> read_as_is(count, false);
  for (int n = static_cast<int>(g.nodes().size()) - 1; n >= 0; --n) {
    const prims::PrimNode& node = g.node(n);
    bool computed = false;
    for (int id : node.outputs) computed = computed || in_forward[id] || pinned[id];
    for (int id : prims::node_reads(node)) {
      if (computed) {
        in_forward[id] = true;
        continue;
      }
      const int producer = g.value(id).node;
      if (kernel_reader(node.prim)) continue;
      if (producer < 0 || !view_pair(node.prim, g.node(producer).prim)) read_as_is[id] = true;
    }
  }
  std::vector<int> depth(count, 0);
  for (const prims::PrimNode& node : g.nodes()) {
    if (prims::prim_info(node.prim).family != prims::Family::View || node.args.empty() || !node.args[0].is_value()) {
      continue;
    }
    for (int id : node.outputs) depth[id] = depth[node.args[0].value] + 1;
  }
  std::vector<int> discount(count, 0);
  for (int id = 0; id < count; ++id) {
    if (in_forward[id] && read_as_is[id]) discount[id] = depth[id];
  }
  return discount;
}

// Pins each forward value lying more than kMaxRecomputeChain elementwise
// nodes below the nearest pinned value or input (outside checkpointed regions).
void pin_long_chains(const prims::PrimGraph& g, const std::vector<bool>& forward, const std::vector<bool>& internal,
                     std::vector<bool>& pinned) {
  std::vector<int> depth(g.values().size(), 0);
  for (const prims::PrimNode& node : g.nodes()) {
    if (node.outputs.empty() || !forward[node.outputs[0]]) continue;
    int deepest = 0;
    for (int id : prims::node_reads(node)) {
      if (!pinned[id]) deepest = std::max(deepest, depth[id]);
    }
    const bool view = prims::prim_info(node.prim).family == prims::Family::View;
    const int made = deepest + (view ? 0 : 1);
    for (int id : node.outputs) {
      if (pinned[id] || internal[id]) continue;
      if (made > kMaxRecomputeChain) {
        pinned[id] = true;
      } else {
        depth[id] = made;
      }
    }
  }
}

}  // namespace

Partition partition_joint_graph(const JointGraph& joint, SavePolicy policy) {
  const prims::PrimGraph& g = joint.graph;
  const int count = static_cast<int>(g.values().size());
  // Forward-computable values, and who makes what.
  std::vector<bool> forward(count, false);
  for (int i = 0; i < joint.forward_input_count; ++i) forward[g.inputs()[i]] = true;
  std::vector<bool> pinned(count, false);  // must be computed by the forward
  const std::vector<bool> internal = internal_to_regions(joint);  // Note [Checkpointed regions]
  for (const prims::PrimNode& node : g.nodes()) {
    bool all = true;
    for (int id : prims::node_reads(node)) all = all && forward[id];
    for (int id : node.outputs) {
      forward[id] = all;
      const bool region_result = !internal[id] && g.value(id).checkpoint >= 0;
      pinned[id] = all && (internal[id] ? !recomputable_in_region(node) : region_result || !recomputable(node.prim));
    }
  }
  for (int id : joint.forward_outputs) pinned[id] = true;
  const std::vector<bool> near_writes = values_near_writes(g);
  for (int id = 0; id < count; ++id) pinned[id] = pinned[id] || (forward[id] && near_writes[id]);
  pin_long_chains(g, forward, internal, pinned);  // Note [Long recomputation chains]
  // What the backward needs from the forward side.
  std::vector<bool> needed(count, false);
  for (const prims::PrimNode& node : g.nodes()) {
    bool backward_node = false;
    for (int id : node.outputs) backward_node = backward_node || !forward[id];
    if (!backward_node) continue;
    for (int id : prims::node_reads(node)) {
      if (forward[id]) needed[id] = true;
    }
  }
  for (int id : joint.input_grads) {
    if (id >= 0 && forward[id]) needed[id] = true;
  }
  std::vector<int> saved;
  if (policy == SavePolicy::SaveNeeded) {
    for (int id = 0; id < count; ++id) {
      if (needed[id]) saved.push_back(id);
    }
  } else {
    // Nodes: source 0, sink 1, then v_in = 2 + 2v, v_out = 3 + 2v.
    MaxFlow flow(2 + 2 * count);
    const int source = 0, sink = 1;
    auto in = [](int v) { return 2 + 2 * v; };
    auto out = [](int v) { return 3 + 2 * v; };
    const std::vector<int> views = saved_view_discounts(g, pinned, joint.forward_outputs);  // Note [Saved views]
    for (int v = 0; v < count; ++v) {
      if (!forward[v]) continue;
      const bool never_saved = internal[v] && !pinned[v];
      const int64_t bytes = prims::value_bytes(g.value(v).meta) - views[v];
      flow.add_edge(in(v), out(v), never_saved ? kInfinity : std::max<int64_t>(1, bytes));
      if (pinned[v] || g.value(v).node < 0) flow.add_edge(source, in(v), kInfinity);
      if (needed[v]) flow.add_edge(out(v), sink, kInfinity);
    }
    for (const prims::PrimNode& node : g.nodes()) {
      if (node.outputs.empty() || !forward[node.outputs[0]]) continue;
      for (int u : prims::node_reads(node)) {
        for (int v : node.outputs) flow.add_edge(out(u), in(v), kInfinity);
      }
    }
    flow.run(source, sink);
    const std::vector<bool> reached = flow.source_side(source);
    for (int v = 0; v < count; ++v) {
      if (forward[v] && reached[in(v)] && !reached[out(v)]) saved.push_back(v);
    }
  }
  Partition result;
  result.forward_output_count = static_cast<int>(joint.forward_outputs.size());
  result.saved_count = static_cast<int>(saved.size());
  for (int v : saved) result.saved_bytes += prims::value_bytes(g.value(v).meta);
  std::vector<int> forward_inputs(g.inputs().begin(), g.inputs().begin() + joint.forward_input_count);
  std::vector<int> forward_outputs = joint.forward_outputs;
  forward_outputs.insert(forward_outputs.end(), saved.begin(), saved.end());
  std::vector<int> forward_roots;  // effects without a result (Note [Writes in the joint graph])
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const prims::PrimNode& node = g.node(static_cast<int>(n));
    if (node.prim != prims::Prim::Extern || prims::extern_effect(node.attrs).empty()) continue;
    if (!node.outputs.empty()) {
      if (forward[node.outputs[0]]) {
        forward_outputs.push_back(node.outputs[0]);
        ++result.effect_count;
      }
      continue;
    }
    bool reads_forward = true;
    for (int id : prims::node_reads(node)) reads_forward = reads_forward && forward[id];
    if (reads_forward) forward_roots.push_back(static_cast<int>(n));
  }
  std::string error;
  result.forward = prims::extract_subgraph(g, forward_inputs, forward_outputs, &error, forward_roots);
  if (!error.empty()) throw std::runtime_error("partition: forward graph: " + error);
  std::vector<int> backward_inputs = saved;
  for (int grad : joint.grad_inputs) {
    result.output_has_grad.push_back(grad >= 0);
    if (grad >= 0) backward_inputs.push_back(grad);
  }
  std::vector<int> backward_outputs;
  for (int grad : joint.input_grads) {
    result.input_grad_slot.push_back(grad >= 0 ? static_cast<int>(backward_outputs.size()) : -1);
    if (grad >= 0) backward_outputs.push_back(grad);
  }
  result.backward = prims::extract_subgraph(g, backward_inputs, backward_outputs, &error);
  if (!error.empty()) throw std::runtime_error("partition: backward graph: " + error);
  // Recomputed values are made just before their first use (Note [Late
  // recomputation] in prims/subgraph.cpp): the backward nodes that read no
  // incoming gradient, effects aside.
  const prims::PrimGraph& bwd = result.backward;
  std::vector<bool> from_grads(bwd.values().size(), false);
  for (size_t i = saved.size(); i < bwd.inputs().size(); ++i) from_grads[bwd.inputs()[i]] = true;
  std::vector<bool> late(bwd.nodes().size(), false);
  for (size_t n = 0; n < bwd.nodes().size(); ++n) {
    const prims::PrimNode& node = bwd.node(static_cast<int>(n));
    bool reads_grad = false;
    for (int id : prims::node_reads(node)) reads_grad = reads_grad || from_grads[id];
    for (int id : node.outputs) from_grads[id] = reads_grad;
    const bool region_value = !node.outputs.empty() && bwd.value(node.outputs[0]).checkpoint >= 0;
    late[n] = !reads_grad && (region_value ? recomputable_in_region(node) : recomputable(node.prim));
  }
  if (prims::PrimGraph sunk; prims::sink_to_first_use(bwd, late, &sunk)) result.backward = std::move(sunk);
  for (size_t i = 0; i < joint.input_grads.size(); ++i) {
    if (joint.input_grads[i] >= 0) result.input_grad_deps.push_back(joint.input_grad_reach[i]);
  }
  return result;
}

}  // namespace kiln::autograd
