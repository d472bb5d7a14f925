#include "inductor/view_copies.h"

#include <algorithm>
#include <vector>

#include "inductor/lower_values.h"
#include "prims/extern_writes.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"

namespace kiln::inductor {
namespace {

using prims::PrimGraph;
using prims::PrimNode;

// Note [A view per kernel reader]
// The scheduler folds a view into a kernel only when every reader of the
// view is in that kernel (Note [Kernel scheduling]): a view two kernels
// read ran as an executor step, an ATen view call, and both kernels read
// its tensor. Batch norm's weight reshaped to [1, C, 1, 1] is read by two
// kernels of a training backward (the input's gradient and the weight's),
// 33 such steps in a MobileNetV3-small backward. A view costs nothing to
// make again inside a kernel, so each elementwise or reduction reader but
// the first gets its own copy, made just before it, together with the
// views that view is a view of (a chain folds whole); the copies fold
// into their readers' kernels like any view read once. Other readers
// (matmuls, externs) keep the original, which stays a step for them. Only
// views that fold into kernels (view_folds) and are no graph output (an
// output must be the view itself) are copied.

// The views, outermost last, from the nearest value no view made to
// `value` (made by view node `node`); empty where one does not fold.
std::vector<int> view_chain(const PrimGraph& graph, int node) {
  std::vector<int> chain;
  for (int n = node; n >= 0;) {
    const PrimNode& view = graph.node(n);
    if (!is_view_node(view) || !view_folds(graph, view) || view.outputs.size() != 1 || view.args.empty() ||
        !view.args[0].is_value()) {
      break;
    }
    chain.push_back(n);
    n = graph.value(view.args[0].value).node;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

}  // namespace

bool copy_views_per_kernel_reader(const PrimGraph& graph, PrimGraph* out) {
  const int node_count = static_cast<int>(graph.nodes().size());
  std::vector<bool> output(graph.values().size(), false);
  for (int value : graph.outputs()) output[value] = true;
  // Per value, the distinct nodes reading it, in node order.
  std::vector<std::vector<int>> readers(graph.values().size());
  for (int n = 0; n < node_count; ++n) {
    for (int value : prims::node_reads(graph.node(n))) {
      if (readers[value].empty() || readers[value].back() != n) readers[value].push_back(n);
    }
  }
  // Per node: the view chains to make again just before it.
  std::vector<std::vector<std::vector<int>>> copies(node_count);
  bool any = false;
  for (int n = 0; n < node_count; ++n) {
    const PrimNode& node = graph.node(n);
    if (!is_view_node(node) || node.outputs.size() != 1 || output[node.outputs[0]]) continue;
    std::vector<int> kernel_readers;
    for (int r : readers[node.outputs[0]]) {
      const PrimNode& reader = graph.node(r);
      if (is_elementwise(graph, reader) || is_kernel_reduction(graph, reader)) kernel_readers.push_back(r);
    }
    if (kernel_readers.size() < 2) continue;
    const std::vector<int> chain = view_chain(graph, n);
    if (chain.empty() || chain.back() != n) continue;
    for (size_t k = 1; k < kernel_readers.size(); ++k) copies[kernel_readers[k]].push_back(chain);
    any = true;
  }
  if (!any) return false;
  PrimGraph result;
  try {
    std::vector<int> map = prims::copy_inputs(result, graph);
    for (int n = 0; n < node_count; ++n) {
      const PrimNode& node = graph.node(n);
      // The copies are seen by this reader only: the map's entries for
      // them are put back after it.
      std::vector<std::pair<int, int>> restore;
      for (const std::vector<int>& chain : copies[n]) {
        for (int v : chain) {
          const int value = graph.node(v).outputs[0];
          restore.emplace_back(value, map[value]);
          prims::copy_node_mapped(result, graph, graph.node(v), map);
        }
      }
      prims::copy_node_mapped(result, graph, node, map);
      for (auto it = restore.rbegin(); it != restore.rend(); ++it) map[it->first] = it->second;
    }
    prims::copy_outputs(result, graph, map);
  } catch (const prims::PrimError&) {
    return false;
  }
  *out = std::move(result);
  return true;
}

}  // namespace kiln::inductor
