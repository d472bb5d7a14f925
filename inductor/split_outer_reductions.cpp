#include "inductor/split_outer_reductions.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>
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
// A bias gradient, [64, 256, 384].sum((0, 1)), has 384 rows of 16384
// points: a few blocks of a 132-SM GPU, each thread looping over thousands
// of points. Before scheduling, a sum, amax or amin (or a var_mean with
// correction 0, as split sums: split_var_mean) of a CUDA graph with at
// most kMaxKeptPoints kept points and at least kMinExtent reduced ones,
// none of them in the innermost dim in memory, becomes two reductions of the same op:
//   - over several dims: the first reduces every reduced dim but the
//     outermost one d0, the second reduces d0 (when d0 has 8 to
//     kMaxSteps points and the rest at least kMinChunk);
//   - over one dim d of extent R: d is viewed as [S, R / S] (always a view,
//     whatever the strides), the first reduces R / S, the second S.
// The first has S times the rows and takes the input's producers into its
// kernel; the second is small and takes the consumers. Reductions over the
// innermost dim are row reductions, a block per long row, so they split
// only when their rows are few (at most kMaxLongRows) and long (at least
// kMinRowExtent points): x.sum() over 16M floats would otherwise run on one
// block, so on one of an H100's 132 SMs; viewed as [128, 131072] it runs on
// 128. Trailing reduced dims laid out as one
// whose outermost has too few points to split at ([4, 1M].sum()) are
// viewed as one dim first, and keepdim's dims come back by a view. Low-precision sums
// keep float32 partials (torch accumulates them in float32 too) and convert
// once at the end. Float sums associate differently than in one step:
// equal up to rounding, the same bits on every run.
constexpr int64_t kMinExtent = 2048;
constexpr int64_t kMaxKeptPoints = 4096;
constexpr int64_t kMinSteps = 8;        // partials per kept point at least
constexpr int64_t kMaxSteps = 128;      // ... and at most
constexpr int64_t kMinChunk = 64;       // points each partial reduces at least
constexpr int64_t kMaxLongRows = 128;   // row reductions: kept points at most
constexpr int64_t kMinRowExtent = 65536;  // ... and reduced points at least

bool low_precision(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// How a reduction splits: `steps` partials per kept point, along dim `dim`
// of the input (split in two by a view when `view`, else the outermost
// reduced dim itself). steps == 0: it does not split.
struct Split {
  int64_t steps = 0;
  int64_t dim = 0;
  bool view = false;
  bool flatten = false;  // reduced dims trailing and contiguous: viewed as one dim first
};

// The number of steps S for extent R: the largest S <= kMaxSteps dividing
// R with R / S >= kMinChunk; 0 when below kMinSteps.
int64_t steps_for(int64_t extent) {
  for (int64_t s = kMaxSteps; s >= kMinSteps; --s) {
    if (extent % s == 0 && extent / s >= kMinChunk) return s;
  }
  return 0;
}

Split plan(const PrimGraph& graph, const PrimNode& node) {
  Split split;
  // var_mean with correction 0 splits as sums (split_var_mean); with a
  // correction, its flat-row rule (Note [Corrected two-pass variance]) would not.
  const bool statistics = node.prim == Prim::VarMean && node.attrs.correction == 0;
  if (node.prim != Prim::Sum && node.prim != Prim::Amax && node.prim != Prim::Amin && !statistics) return split;
  if (node.args.size() != 1 || !node.args[0].is_value() || node.attrs.dims.empty()) return split;
  const graph::TensorMeta& in = graph.value(node.args[0].value).meta;
  const int64_t rank = static_cast<int64_t>(in.sizes.size());
  std::vector<bool> reduced(rank, false);
  for (int64_t d : node.attrs.dims) {
    if (d < 0 || d >= rank) return split;
    reduced[d] = true;
  }
  if (rank == 0) return split;
  int64_t kept = 1, extent = 1, d0 = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      kept *= in.sizes[d];
    } else {
      extent *= in.sizes[d];
      if (d0 < 0) d0 = d;
    }
  }
  if (kept == 0) return split;
  // The innermost dim in memory (a channels-last map's C, not its W): a
  // reduction over it is a row reduction.
  int64_t innermost = -1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (in.sizes[d] > 1 && (innermost < 0 || std::abs(in.strides[d]) < std::abs(in.strides[innermost]))) {
      innermost = d;
    }
  }
  if (innermost < 0) innermost = rank - 1;
  if (reduced[innermost]) {
    // A row reduction: parallel over its rows already, unless they are few and long.
    if (kept > kMaxLongRows || extent < kMinRowExtent) return split;
  } else if (extent < kMinExtent || kept > kMaxKeptPoints) {
    return split;
  }
  if (node.attrs.dims.size() == 1) {
    split.steps = steps_for(extent);
    split.dim = d0;
    split.view = true;
  } else if (in.sizes[d0] >= kMinSteps && in.sizes[d0] <= kMaxSteps && extent / in.sizes[d0] >= kMinChunk) {
    split.steps = in.sizes[d0];
    split.dim = d0;
  } else if (reduced[innermost] && innermost == rank - 1) {
    // Trailing reduced dims laid out as one ([4, 1M].sum()): one dim, split by a view.
    bool trailing = true;
    for (int64_t d = d0; d < rank; ++d) {
      trailing = trailing && reduced[d] && in.strides[d] == (d + 1 < rank ? in.strides[d + 1] * in.sizes[d + 1] : 1);
    }
    if (trailing) {
      split.steps = steps_for(extent);
      split.dim = d0;
      split.view = split.flatten = true;
    }
  }
  return split;
}

// `prim` (sum, amax, amin) of `input` over `dims`, in the two steps `split`
// says; the result in `accumulate` (or the prim's dtype).
int split_reduce(prims::PrimBuilder& b, Prim prim, int input, const std::vector<int64_t>& dims, bool keepdim,
                 const Split& split, std::optional<DType> accumulate) {
  int partials;
  int source = input;
  if (split.flatten) {
    std::vector<int64_t> sizes(b.meta(input).sizes.begin(), b.meta(input).sizes.begin() + split.dim);
    int64_t extent = 1;
    for (size_t d = split.dim; d < b.meta(input).sizes.size(); ++d) extent *= b.meta(input).sizes[d];
    sizes.push_back(extent);
    source = b.view(input, sizes);
  }
  if (split.view) {
    std::vector<int64_t> sizes = b.meta(source).sizes;
    sizes[split.dim] /= split.steps;
    sizes.insert(sizes.begin() + split.dim, split.steps);
    partials = b.reduce(prim, b.view(source, sizes), {split.dim + 1}, false, accumulate);
  } else {
    std::vector<int64_t> rest;
    for (int64_t d : dims) {
      if (d != split.dim) rest.push_back(d);
    }
    partials = b.reduce(prim, input, rest, keepdim, accumulate);
  }
  // Dims after split.dim may have gone (keepdim false); split.dim itself stays where it was.
  // A flattened reduction keeps no dims of its own; keepdim's come back by a view.
  int value = b.reduce(prim, partials, {split.dim}, keepdim && !split.flatten,
                       prim == Prim::Sum ? accumulate : std::nullopt);
  if (split.flatten && keepdim) {
    std::vector<int64_t> sizes = b.meta(input).sizes;
    for (int64_t d : dims) sizes[d] = 1;
    value = b.view(value, sizes);
  }
  return value;
}

// var_mean(x) with correction 0 (batch and layer norm statistics) as split
// sums, in the corrected two-pass form its kernel computes (Note [Corrected
// two-pass variance]): rough = sum(x) / n, c = x - rough, mean = rough +
// sum(c) / n, var = max(sum(c^2) - sum(c)^2 / n, 0) / n, in float32. A
// channels-last batch norm's statistics ([32, 64, 112, 112] over N, H and
// W with C innermost) were one tile kernel of 64 columns, 18 ms of a
// ResNet-50 training step on the H100.
std::pair<int, int> split_var_mean(prims::PrimBuilder& b, int input, const std::vector<int64_t>& dims, bool keepdim,
                                   const Split& split) {
  const graph::TensorMeta in = b.meta(input);  // a copy: appending nodes moves the values
  int64_t count = 1;
  for (int64_t d : dims) count *= in.sizes[d];
  const int x = low_precision(in.dtype) ? b.convert(input, DType::Float32) : input;
  const DType dtype = b.meta(x).dtype;
  const PrimArg n = PrimArg::of_scalar(prims::Scalar::of_float(static_cast<double>(count)));
  auto sum = [&](int v) { return split_reduce(b, Prim::Sum, v, dims, true, split, dtype); };
  const int rough = b.binary(Prim::Div, PrimArg::of_value(sum(x)), n);
  const int centered = b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(rough));
  const int deviation = sum(centered);
  const int squares = sum(b.binary(Prim::Mul, PrimArg::of_value(centered), PrimArg::of_value(centered)));
  int mean = b.binary(Prim::Add, PrimArg::of_value(rough),
                      PrimArg::of_value(b.binary(Prim::Div, PrimArg::of_value(deviation), n)));
  const int spread = b.binary(
      Prim::Sub, PrimArg::of_value(squares),
      PrimArg::of_value(b.binary(Prim::Div, PrimArg::of_value(b.binary(Prim::Mul, PrimArg::of_value(deviation),
                                                                        PrimArg::of_value(deviation))),
                                 n)));
  int var = b.binary(Prim::Div,
                     PrimArg::of_value(b.binary(Prim::Maximum, PrimArg::of_value(spread),
                                                PrimArg::of_scalar(prims::Scalar::of_float(0)))),
                     n);
  if (!keepdim) {
    std::vector<int64_t> sizes;
    for (size_t d = 0; d < in.sizes.size(); ++d) {
      if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) sizes.push_back(in.sizes[d]);
    }
    var = b.view(var, sizes);
    mean = b.view(mean, sizes);
  }
  return {var, mean};
}

}  // namespace

bool split_outer_reductions(const PrimGraph& graph, PrimGraph* out) {
  bool any = false;
  for (const PrimNode& node : graph.nodes()) any = any || plan(graph, node).steps > 0;
  if (!any) return false;
  PrimGraph result;
  try {
    std::vector<int> map = prims::copy_inputs(result, graph);
    prims::PrimBuilder b(result);
    for (const PrimNode& node : graph.nodes()) {
      const Split split = plan(graph, node);
      if (split.steps == 0) {
        prims::copy_node_mapped(result, graph, node, map);
        continue;
      }
      const int input = map[node.args[0].value];
      std::vector<int> values;
      if (node.prim == Prim::VarMean) {
        const auto [var, mean] = split_var_mean(b, input, node.attrs.dims, node.attrs.keepdim, split);
        values = {var, mean};
      } else {
        std::optional<DType> accumulate = node.attrs.dtype;
        if (node.prim == Prim::Sum && low_precision(graph.value(node.outputs[0]).meta.dtype)) {
          accumulate = DType::Float32;
        }
        values = {split_reduce(b, node.prim, input, node.attrs.dims, node.attrs.keepdim, split, accumulate)};
      }
      for (size_t i = 0; i < values.size(); ++i) {
        int value = values[i];
        const graph::TensorMeta& want = graph.value(node.outputs[i]).meta;
        if (b.meta(value).dtype != want.dtype) value = b.convert(value, want.dtype);
        if (graph.value(node.outputs[i]).grad_stopped) result.stop_grad(value);
        map[node.outputs[i]] = value;
      }
    }
    prims::copy_outputs(result, graph, map);
  } catch (const prims::PrimError&) {
    return false;  // a view or reduction the meta rules refuse: kept as it is
  }
  *out = std::move(result);
  return true;
}

}  // namespace kiln::inductor
