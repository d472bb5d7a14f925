#include "inductor/split_outer_reductions.h"

#include <optional>
#include <vector>

#include "prims/prim_builder.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"

namespace kiln::inductor {
namespace {

using graph::DType;
using prims::Prim;
using prims::PrimArg;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Two-step outer reductions]
// A CUDA reduction kernel has one row per kept point (Note [CUDA kernels]).
// A bias gradient, [16384, 384].sum(0), has 384 rows of 16384 points: a few
// blocks of a 132-SM GPU, each thread looping over thousands of points.
// Before scheduling, a sum, amax or amin of a CUDA graph over one dim d of
// extent R >= kMinExtent that is not the innermost one, with at most
// kMaxKeptPoints kept points, becomes two reductions of the same op: the
// input viewed with d split into [S, R / S] (always a view, whatever the
// strides) is reduced over R / S, then the S partials over S. The first
// has S times the rows and takes the input's producers into its kernel;
// the second is small and takes the consumers. Low-precision sums keep
// float32 partials (torch accumulates them in float32 too) and convert
// once at the end. Float sums associate differently than in one step:
// equal up to rounding, the same bits on every run.
constexpr int64_t kMinExtent = 2048;
constexpr int64_t kMaxKeptPoints = 4096;
constexpr int64_t kMaxSteps = 128;      // S at most
constexpr int64_t kMinChunk = 64;       // R / S at least

bool low_precision(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// The reduced dim of a qualifying reduction node, or nullopt.
std::optional<int64_t> split_dim(const PrimGraph& graph, const PrimNode& node) {
  if (node.prim != Prim::Sum && node.prim != Prim::Amax && node.prim != Prim::Amin) return std::nullopt;
  if (node.args.size() != 1 || !node.args[0].is_value() || node.attrs.dims.size() != 1) return std::nullopt;
  const graph::TensorMeta& in = graph.value(node.args[0].value).meta;
  const int64_t d = node.attrs.dims[0];
  const int64_t rank = static_cast<int64_t>(in.sizes.size());
  if (d < 0 || d + 1 >= rank) return std::nullopt;  // the innermost dim: row reductions parallelize already
  int64_t kept = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != d) kept *= in.sizes[i];
  }
  if (in.sizes[d] < kMinExtent || kept == 0 || kept > kMaxKeptPoints) return std::nullopt;
  return d;
}

// The number of steps S for extent R: the largest S <= kMaxSteps dividing
// R with R / S >= kMinChunk; 0 when below 8.
int64_t steps_for(int64_t extent) {
  for (int64_t s = kMaxSteps; s >= 8; --s) {
    if (extent % s == 0 && extent / s >= kMinChunk) return s;
  }
  return 0;
}

}  // namespace

bool split_outer_reductions(const PrimGraph& graph, PrimGraph* out) {
  bool any = false;
  for (const PrimNode& node : graph.nodes()) {
    if (std::optional<int64_t> d = split_dim(graph, node)) {
      any = any || steps_for(graph.value(node.args[0].value).meta.sizes[*d]) > 0;
    }
  }
  if (!any) return false;
  PrimGraph result;
  try {
  std::vector<int> map(graph.values().size(), -1);
  for (int id : graph.inputs()) map[id] = result.add_input(graph.value(id).meta);
  prims::PrimBuilder b(result);
  for (const PrimNode& node : graph.nodes()) {
    const std::optional<int64_t> d = split_dim(graph, node);
    const int64_t steps = d ? steps_for(graph.value(node.args[0].value).meta.sizes[*d]) : 0;
    if (steps == 0) {
      const std::vector<int> made = prims::copy_node(result, graph, node, map);
      for (size_t i = 0; i < made.size(); ++i) map[node.outputs[i]] = made[i];
      continue;
    }
    const int input = map[node.args[0].value];
    std::vector<int64_t> sizes = b.meta(input).sizes;
    const int64_t extent = sizes[*d];
    sizes[*d] = extent / steps;
    sizes.insert(sizes.begin() + *d, steps);
    const DType want = graph.value(node.outputs[0]).meta.dtype;
    std::optional<DType> accumulate = node.attrs.dtype;
    if (node.prim == Prim::Sum && low_precision(want)) accumulate = DType::Float32;
    const int viewed = b.view(input, sizes);
    const int partials = b.reduce(node.prim, viewed, {*d + 1}, false, accumulate);
    int value = b.reduce(node.prim, partials, {*d}, node.attrs.keepdim,
                         node.prim == Prim::Sum ? accumulate : std::nullopt);
    if (b.meta(value).dtype != want) value = b.convert(value, want);
    if (graph.value(node.outputs[0]).grad_stopped) result.stop_grad(value);
    map[node.outputs[0]] = value;
  }
  std::vector<int> outputs;
  for (int id : graph.outputs()) outputs.push_back(map[id]);
  result.set_outputs(std::move(outputs));
  } catch (const prims::PrimError&) {
    return false;  // a view or reduction the meta rules refuse: kept as it is
  }
  *out = std::move(result);
  return true;
}

}  // namespace kiln::inductor
