#include "inductor/recompute_outputs.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "inductor/kernel_ir.h"
#include "inductor/lower_values.h"
#include "inductor/schedule.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Recomputed kernel outputs]
// The scheduler puts each node in one group, so a value that two kernels
// need is computed by one and stored for the other. Where the two reduce
// different dims that is common: layer_norm's backward reduces the
// features in one kernel (the row statistics) and the tokens in another
// (the weight and bias gradients), and the row kernel stored five
// full-size float32 intermediates for the other to read back: the
// gradient converted from bfloat16, the residual recomputed, x - mean,
// ... (session 7's GPT profile). After scheduling, an output of a group
// that
//   - is no graph output and is read outside its group by one other group
//     only (no extern, no unscheduled node),
//   - is computed inside its group by a cone of at most kMaxCone cheap
//     elementwise nodes (arithmetic, compares, where, conversions; a
//     transcendental only on values smaller than the output, such as a row
//     statistic's rsqrt) and the views the kernels fold, from values the
//     group reads or already outputs,
//   - and whose cone reads, of what the reader does not read already,
//     fewer bytes than storing and loading the output costs,
// gets a copy of its cone for the reading group, which then computes it in
// registers; the output itself stays only if something else needs it. The
// graph is scheduled again; copies compute the same ops in the same order,
// so every result keeps its bits.
//
// A copy helps only where the scheduler then puts it into the reading
// group. Where it cannot (torchvision Swin's window permute-and-copy read
// by a layer norm's row kernel, before Note [Reshapes in kernels] let the
// row kernel read it), the copy becomes a storing kernel of its own, the
// original is dropped as dead, and the next round finds the same graph
// again. So plan_kernels keeps a round only when the new schedule stores
// fewer bytes (stored_bytes) than the one before it, and returns to the
// earlier graph and groups otherwise (Swin's forward and backward had run
// all eight rounds, nine schedules each).
constexpr size_t kMaxCone = 12;

bool cheap(Prim prim) {
  switch (prim) {
    case Prim::Abs: case Prim::Neg: case Prim::Add: case Prim::Sub: case Prim::Mul: case Prim::Div:
    case Prim::Maximum: case Prim::Minimum: case Prim::Eq: case Prim::Ne: case Prim::Lt: case Prim::Le:
    case Prim::Gt: case Prim::Ge: case Prim::LogicalNot: case Prim::LogicalAnd: case Prim::LogicalOr:
    case Prim::Where: case Prim::ConvertElementType: case Prim::Clone:
      return true;
    default:
      return false;
  }
}

int64_t numel(const graph::TensorMeta& meta) {
  int64_t n = 1;
  for (int64_t size : meta.sizes) n *= size;
  return n;
}

int64_t bytes(const graph::TensorMeta& meta) { return numel(meta) * item_size(meta.dtype); }

// One output to recompute: its cone (node ids, ascending) and the group reading it.
struct Plan {
  int value = -1;
  int reader = -1;
  std::vector<int> cone;
};

class Planner {
 public:
  Planner(const PrimGraph& graph, const std::vector<KernelGroup>& groups)
      : graph_(graph), groups_(groups), group_of_(graph.nodes().size(), -1), users_(graph.values().size()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int n : groups[g].nodes) group_of_[n] = static_cast<int>(g);
    }
    for (size_t n = 0; n < graph.nodes().size(); ++n) {
      for (int value : node_reads(graph.node(static_cast<int>(n)))) users_[value].push_back(static_cast<int>(n));
    }
    outputs_.insert(graph.outputs().begin(), graph.outputs().end());
  }

  // The group of each node, -1 for none.
  const std::vector<int>& group_of() const { return group_of_; }

  std::vector<Plan> plans() const {
    std::vector<Plan> out;
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (int value : groups_[g].outputs) {
        if (std::optional<Plan> plan = plan_for(static_cast<int>(g), value)) out.push_back(std::move(*plan));
      }
    }
    return out;
  }

 private:
  std::optional<Plan> plan_for(int g, int value) const {
    if (outputs_.count(value) > 0) return std::nullopt;
    int reader = -1;
    for (int user : users_[value]) {
      const int h = group_of_[user];
      if (h == g) continue;
      if (h < 0 || (reader >= 0 && reader != h)) return std::nullopt;
      reader = h;
    }
    if (reader < 0) return std::nullopt;
    const std::set<int> own_outputs(groups_[g].outputs.begin(), groups_[g].outputs.end());
    const int64_t size = numel(graph_.value(value).meta);
    // The cone: nodes of g computing `value` from values g reads or outputs.
    std::set<int> cone, leaves;
    std::vector<int> work = {value};
    while (!work.empty()) {
      const int v = work.back();
      work.pop_back();
      const int n = graph_.value(v).node;
      const bool inside = n >= 0 && group_of_[n] == g;
      if (!inside || (v != value && own_outputs.count(v) > 0)) {
        leaves.insert(v);
        continue;
      }
      const PrimNode& node = graph_.node(n);
      const bool small = numel(graph_.value(v).meta) < size;
      const bool unary = prims::prim_info(node.prim).family == prims::Family::Unary;
      if (node.outputs.size() != 1 || !(cheap(node.prim) || is_view_node(node) || (small && unary))) {
        return std::nullopt;  // a reduction or a costly op: stored it stays
      }
      if (!cone.insert(n).second) continue;
      if (cone.size() > kMaxCone) return std::nullopt;
      for (const prims::PrimArg& arg : node.args) {
        if (arg.is_value()) work.push_back(arg.value);
      }
    }
    // What the reader reads now, from outside it.
    std::set<int> reads;
    for (int n : groups_[reader].nodes) {
      for (int v : node_reads(graph_.node(n))) {
        const int p = graph_.value(v).node;
        if (p < 0 || group_of_[p] != reader) reads.insert(v);
      }
    }
    int64_t extra = 0;
    for (int leaf : leaves) {
      if (reads.count(leaf) == 0) extra += bytes(graph_.value(leaf).meta);
    }
    if (extra >= 2 * bytes(graph_.value(value).meta)) return std::nullopt;
    return Plan{value, reader, std::vector<int>(cone.begin(), cone.end())};
  }

  const PrimGraph& graph_;
  const std::vector<KernelGroup>& groups_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> users_;
  std::set<int> outputs_;
};

}  // namespace

bool recompute_kernel_outputs(const PrimGraph& graph, const std::vector<KernelGroup>& groups, PrimGraph* out) {
  const Planner planner(graph, groups);
  const std::vector<Plan> plans = planner.plans();
  if (plans.empty()) return false;
  const std::vector<int>& group_of = planner.group_of();
  // Each plan's copy is made right after the node computing its value.
  std::map<int, std::vector<const Plan*>> after;
  for (const Plan& plan : plans) after[graph.value(plan.value).node].push_back(&plan);
  std::map<std::pair<int, int>, int> copies;  // (value, reader group) -> the copy's value in `result`
  PrimGraph result;
  try {
    std::vector<int> map = prims::copy_inputs(result, graph);
    for (int n = 0; n < static_cast<int>(graph.nodes().size()); ++n) {
      const PrimNode& node = graph.node(n);
      // A reader's node reads the copies made for its group.
      std::vector<std::pair<int, int>> restore;
      if (group_of[n] >= 0) {
        for (int v : node_reads(node)) {
          const auto copy = copies.find({v, group_of[n]});
          if (copy == copies.end()) continue;
          restore.emplace_back(v, map[v]);
          map[v] = copy->second;
        }
      }
      const std::vector<int> made = prims::copy_node(result, graph, node, map);
      for (const auto& [v, id] : restore) map[v] = id;
      for (size_t i = 0; i < made.size(); ++i) map[node.outputs[i]] = made[i];
      const auto due = after.find(n);
      if (due == after.end()) continue;
      for (const Plan* plan : due->second) {
        std::vector<int> cone_map = map;
        for (int c : plan->cone) {
          const PrimNode& original = graph.node(c);
          const std::vector<int> again = prims::copy_node(result, graph, original, cone_map);
          for (size_t i = 0; i < again.size(); ++i) cone_map[original.outputs[i]] = again[i];
        }
        copies[{plan->value, plan->reader}] = cone_map[plan->value];
      }
    }
    prims::copy_outputs(result, graph, map);
  } catch (const prims::PrimError&) {
    return false;
  }
  *out = std::move(result);
  return true;
}

int64_t stored_bytes(const PrimGraph& graph, const std::vector<KernelGroup>& groups) {
  int64_t total = 0;
  for (const KernelGroup& group : groups) {
    for (int value : group.outputs) total += bytes(graph.value(value).meta);
  }
  return total;
}

}  // namespace kiln::inductor
