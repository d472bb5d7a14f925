#include "prims/stages.h"

#include <algorithm>

#include "base/check.h"

#include "prims/common_meta.h"
#include "prims/extern_writes.h"
#include "prims/subgraph.h"

namespace kiln::prims {

// Note [Gradient buckets]
// DistributedDataParallel all-reduces gradients in buckets of about
// bucket_bytes_cap, each launched as soon as every gradient in it has been
// accumulated, so that communication overlaps the rest of the backward. A
// compiled graph whose backward is one autograd Function hands all its
// gradients over at once, when it returns: nothing is left to overlap. So
// a graph compiled inside DDP's forward is cut into stages, each run as
// its own Function (interpreter/backends.cpp): the backward then runs stage
// by stage, the last first, and the gradients of the parameters first read
// in a stage are complete, and DDP's hooks fire, as soon as that stage's
// backward returns. Cuts are placed walking back from the graph's end,
// counting each gradient-wanting input's bytes at its first reader (where
// the backward completes its gradient), and cutting where the count since
// the last cut reaches the bucket size; Dynamo's DDPOptimizer cuts FX
// graphs by the same rule. The price: values that cross a cut are
// materialized (no kernel fuses across it, the backward of one stage does
// not recompute another's values), and each stage is one more Function
// call per step.

std::vector<int> gradient_bucket_cuts(const PrimGraph& graph, const std::vector<bool>& wants_grad,
                                      int64_t bucket_bytes) {
  const std::vector<int>& inputs = graph.inputs();
  std::vector<bool> counts(graph.values().size(), false);
  for (size_t i = 0; i < inputs.size() && i < wants_grad.size(); ++i) counts[inputs[i]] = wants_grad[i];
  // The first reader of each counted input.
  std::vector<int> first_reader(graph.values().size(), -1);
  const int node_count = static_cast<int>(graph.nodes().size());
  for (int n = 0; n < node_count; ++n) {
    for (int id : node_reads(graph.node(n))) {
      if (counts[id] && first_reader[id] < 0) first_reader[id] = n;
    }
  }
  std::vector<int64_t> bytes_at(node_count, 0);
  for (int id : inputs) {
    if (first_reader[id] >= 0) bytes_at[first_reader[id]] += value_bytes(graph.value(id).meta);
  }
  std::vector<int> cuts;
  int64_t bucket = 0;
  for (int n = node_count - 1; n > 0 && bucket_bytes > 0; --n) {
    bucket += bytes_at[n];
    if (bucket >= bucket_bytes) {
      cuts.push_back(n);
      bucket = 0;
    }
  }
  std::reverse(cuts.begin(), cuts.end());
  return cuts;
}

std::vector<Stage> split_stages(const PrimGraph& graph, const std::vector<int>& cuts) {
  const int node_count = static_cast<int>(graph.nodes().size());
  const int value_count = static_cast<int>(graph.values().size());
  for (size_t k = 0; k < cuts.size(); ++k) {
    KILN_CHECK(cuts[k] > 0 && cuts[k] < node_count && (k == 0 || cuts[k - 1] < cuts[k]),
               "cut " << k << " at node " << cuts[k] << " of " << node_count << ": cuts must ascend inside the graph");
  }
  std::vector<int> stage_of(node_count, 0);
  for (int n = 0, k = 0; n < node_count; ++n) {
    while (k < static_cast<int>(cuts.size()) && cuts[k] <= n) ++k;
    stage_of[n] = k;
  }
  const int stage_count = static_cast<int>(cuts.size()) + 1;
  // Per value: the stage making it (-1 for graph inputs) and whether a
  // later stage, or the graph's caller, reads it.
  std::vector<int> made_in(value_count, -1);
  for (int n = 0; n < node_count; ++n) {
    for (int id : graph.node(n).outputs) made_in[id] = stage_of[n];
  }
  std::vector<bool> exported(value_count, false);
  std::vector<std::vector<bool>> read_in(stage_count, std::vector<bool>(value_count, false));
  for (int n = 0; n < node_count; ++n) {
    for (int id : node_reads(graph.node(n))) {
      if (made_in[id] == stage_of[n]) continue;
      read_in[stage_of[n]][id] = true;
      if (made_in[id] >= 0) exported[id] = true;
    }
  }
  for (int id : graph.outputs()) exported[id] = exported[id] || made_in[id] >= 0;
  std::vector<Stage> stages(stage_count);
  std::vector<int> map(value_count, -1);
  for (int k = 0; k < stage_count; ++k) {
    Stage& stage = stages[k];
    std::fill(map.begin(), map.end(), -1);
    for (int id = 0; id < value_count; ++id) {
      if (!read_in[k][id]) continue;
      map[id] = stage.graph.add_input(graph.value(id).meta);
      if (graph.value(id).grad_stopped) stage.graph.stop_grad(map[id]);
      stage.inputs.push_back(id);
    }
    for (int n = 0; n < node_count; ++n) {
      if (stage_of[n] == k) copy_node_mapped(stage.graph, graph, graph.node(n), map);
    }
    std::vector<int> outputs;
    for (int id = 0; id < value_count; ++id) {
      if (made_in[id] != k || !exported[id]) continue;
      outputs.push_back(map[id]);
      stage.outputs.push_back(id);
    }
    stage.graph.set_outputs(std::move(outputs));
  }
  return stages;
}

}  // namespace kiln::prims
