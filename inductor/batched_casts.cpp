#include "inductor/batched_casts.h"

#include <map>
#include <stdexcept>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/module_attr.h"
#include "base/py_ref.h"
#include "inductor/node_rewrite.h"
#include "prims/extern_writes.h"

namespace kiln::inductor {
namespace {

using prims::Family;
using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Batched weight casts]
// Under autocast every matmul casts its float32 weight to the 16-bit
// dtype: a 6-layer Llama's training step ran 43 such one-cast kernels in
// the forward and 37 in the backward (its partitioner recomputes them from
// the parameters rather than saving them), about 13 us of host time each
// on the H200 in a step bound by host time (0.98 ms of 12.6). Their
// sources are graph inputs, so all of them can run where the first ran:
// torch._foreach_copy_ into fresh tensors converts a list in one
// multi-tensor kernel on CUDA and one Python call
// (kiln._batched_casts.cast_all). A cast qualifies when
// - its input is a graph input laid out contiguously (the copy is made by
//   empty_like, whose layout must be the cast's) that no extern call may
//   write (moving the cast earlier must not read it before a write), and
// - every reader of its result, followed through views, is a matmul, an
//   extern call or a graph output: a cast a pointwise reader reads fuses
//   into that reader's kernel and costs no launch of its own.
// Casts group by source and target dtype; a group of one stays. The cost:
// the converted copies live from the first cast on (one 16-bit copy of
// the weights; a forward under autocast saves most of them anyway).

// True when every reader of `value` (through views) is a matmul, an
// extern call or a graph output.
bool read_as_a_whole(const PrimGraph& graph, int value, const std::vector<std::vector<int>>& readers) {
  for (int n : readers[value]) {
    const PrimNode& node = graph.node(n);
    if (node.prim == Prim::Matmul || node.prim == Prim::Extern) continue;
    if (prims::prim_info(node.prim).family != Family::View || node.outputs.size() != 1) return false;
    if (!read_as_a_whole(graph, node.outputs[0], readers)) return false;
  }
  return true;
}

// `module`.`name` (base::import_attr), or a runtime_error naming it.
base::PyRef required_attr(const char* module, const char* name) {
  base::PyRef attr = base::PyRef::steal(base::import_attr(module, name));
  if (!attr) throw std::runtime_error(std::string("batched casts: no ") + module + "." + name);
  return attr;
}

}  // namespace

bool batch_input_casts(const PrimGraph& graph, PrimGraph* out) {
  const size_t node_count = graph.nodes().size();
  std::vector<std::vector<int>> readers(graph.values().size());
  for (size_t n = 0; n < node_count; ++n) {
    for (int value : prims::node_reads(graph.node(n))) readers[value].push_back(static_cast<int>(n));
  }
  const std::unordered_set<int> inputs(graph.inputs().begin(), graph.inputs().end());
  // The alias analysis only for graphs with a candidate (every rewrite
  // round asks each pass; most graphs have none).
  std::vector<bool> writable;
  // Per (source, target) dtype pair, its casts in node order.
  std::map<std::pair<graph::DType, graph::DType>, std::vector<size_t>> groups;
  for (size_t n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    if (node.prim != Prim::ConvertElementType || node.outputs.size() != 1 || node.args.empty() ||
        !node.args[0].is_value()) {
      continue;
    }
    const int source = node.args[0].value;
    const graph::TensorMeta& from = graph.value(source).meta;
    const graph::TensorMeta& to = graph.value(node.outputs[0]).meta;
    if (!inputs.count(source) || from.dtype == to.dtype) continue;
    if (from.strides != graph::contiguous_strides(from.sizes) || to.strides != from.strides) continue;
    if (!read_as_a_whole(graph, node.outputs[0], readers)) continue;
    if (writable.empty()) writable = prims::writable_values(graph);
    if (writable[source]) continue;
    groups[{from.dtype, to.dtype}].push_back(n);
  }
  // Per batched cast node: its group's first node and its position there.
  std::vector<std::pair<size_t, size_t>> slot(node_count, {node_count, 0});
  bool any = false;
  for (const auto& [pair, casts] : groups) {
    if (casts.size() < 2) continue;
    any = true;
    for (size_t k = 0; k < casts.size(); ++k) slot[casts[k]] = {casts[0], k};
  }
  if (!any) return false;
  const base::PyRef cast_all = required_attr("kiln._batched_casts", "cast_all");
  std::vector<std::vector<int>> made(node_count);  // per group's first node: the call's outputs
  auto action = [&](size_t n) { return slot[n].first < node_count ? NodeAction::Replace : NodeAction::Copy; };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const auto [first, position] = slot[n];
    if (n == first) {
      const graph::DType target = graph.value(graph.node(n).outputs[0]).meta.dtype;
      const base::PyRef dtype = required_attr("torch", graph::dtype_name(target));
      std::vector<graph::Arg> args = {graph::Arg::of_constant(dtype.get())};
      std::vector<graph::TensorMeta> metas;
      for (const auto& [pair, casts] : groups) {
        if (casts.front() != first) continue;
        for (size_t cast : casts) {
          args.push_back(graph::Arg::of_node(map[graph.node(cast).args[0].value]));
          metas.push_back(graph.value(graph.node(cast).outputs[0]).meta);
        }
      }
      made[first] = b.extern_call(cast_all.get(), "kiln.cast_all", std::move(args), {}, metas, /*pure=*/true);
    }
    return made[first].at(position);
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
