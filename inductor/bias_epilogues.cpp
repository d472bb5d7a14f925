#include "inductor/bias_epilogues.h"

#include <stdexcept>
#include <vector>

#include "inductor/node_rewrite.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "prims/prim_error.h"
#include "prims/subgraph.h"
#include "base/py_ref.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Bias epilogues]
// Linear decomposes to matmul(x, w^T) then add(_, b), so a CUDA graph ran
// cuBLAS for the product and a kernel that read it back to add the bias
// (for the GPT benchmark's qkv projection, a whole 29 us kernel a layer;
// for its first MLP layer, a third more bytes in the GELU kernel, which
// also had to store the sum). torch's linear hands the bias to cuBLASLt,
// which adds it to the float accumulator before the one rounding to the
// output dtype: eager's own numerics (eager's nn.Linear is this call),
// one rounding fewer than the decomposition's.
//
// An add qualifies when one operand is a matmul result read by nothing
// else (nor a graph output) and the other a vector of the product's last
// size, all three of one floating dtype, with a 2-D right operand. It
// becomes torch.nn.functional.linear(x, w, b) with w = permute(right,
// (1, 0)) (a view; for the decomposed Linear, the weight itself). Only CUDA
// graphs take it: the CPU inductor has its own GEMM nodes.

// For each value, the number of nodes reading it plus its graph-output uses.
std::vector<int> use_counts(const PrimGraph& graph) {
  std::vector<int> uses(graph.values().size(), 0);
  for (const PrimNode& node : graph.nodes()) {
    for (int id : node_reads(node)) ++uses[id];
  }
  for (int id : graph.outputs()) ++uses[id];
  return uses;
}

bool is_float(graph::DType d) {
  return d == graph::DType::Float32 || d == graph::DType::Float16 || d == graph::DType::BFloat16 ||
         d == graph::DType::Float64;
}

// The fold of add `node`: the index (0 or 1) of its matmul operand, or -1.
int matmul_operand(const PrimGraph& graph, const PrimNode& node, const std::vector<int>& uses) {
  if (node.prim != Prim::Add || node.args.size() != 2) return -1;
  if (!node.args[0].is_value() || !node.args[1].is_value()) return -1;
  const graph::TensorMeta& out = graph.value(node.outputs[0]).meta;
  for (int side = 0; side < 2; ++side) {
    const int product = node.args[side].value;
    const int bias = node.args[1 - side].value;
    const int made_by = graph.value(product).node;
    if (made_by < 0 || graph.node(made_by).prim != Prim::Matmul || uses[product] != 1) continue;
    const PrimNode& mm = graph.node(made_by);
    if (mm.args.size() != 2 || !mm.args[0].is_value() || !mm.args[1].is_value()) continue;
    const graph::TensorMeta& p = graph.value(product).meta;
    const graph::TensorMeta& x = graph.value(mm.args[0].value).meta;
    const graph::TensorMeta& w = graph.value(mm.args[1].value).meta;
    const graph::TensorMeta& b = graph.value(bias).meta;
    if (!is_float(p.dtype) || x.dtype != p.dtype || w.dtype != p.dtype || b.dtype != p.dtype) continue;
    if (x.sizes.size() < 2 || w.sizes.size() != 2 || b.sizes.size() != 1) continue;
    if (p.sizes.empty() || b.sizes[0] != p.sizes.back() || out.sizes != p.sizes || out.dtype != p.dtype) continue;
    return side;
  }
  return -1;
}

// torch.nn.functional.linear, for the extern calls both folds make.
base::PyRef linear_function() {
  base::PyRef linear = base::PyRef::steal(PyImport_ImportModule("torch.nn.functional"));
  if (linear) linear = base::PyRef::steal(PyObject_GetAttrString(linear.get(), "linear"));
  if (!linear) {
    PyErr_Clear();
    throw std::runtime_error("bias epilogues: torch.nn.functional.linear is not importable");
  }
  return linear;
}

// Note [Linear without a bias]
// A Linear without a bias (every projection of Llama and T5) decomposes to
// matmul(x, permute(w, (1, 0))): two executor steps, an ATen view and the
// product, where torch's linear of w is one (cuBLAS reads w transposed
// either way; the same call and numerics as eager's nn.Linear). A 6-layer
// Llama's forward made 43 such views. A matmul qualifies when its right
// operand is that permute of a 2-D value, all three of one floating dtype;
// the permute, left to other readers or none, is dropped when unread. The
// executor's native step for it transposes w in C++ and multiplies as the
// matmul step did (large 16-bit products padded: Note [Padded GEMM dims]),
// not through at::linear, so the product's kernels stay the same.

// The value a qualifying matmul `node` reads transposed, or -1.
int transposed_weight(const PrimGraph& graph, const PrimNode& node) {
  if (node.prim != Prim::Matmul || node.args.size() != 2 || !node.args[0].is_value() || !node.args[1].is_value()) {
    return -1;
  }
  const int right = node.args[1].value;
  if (graph.value(right).node < 0) return -1;
  const PrimNode& view = graph.node(graph.value(right).node);
  if (view.prim != Prim::Permute || view.attrs.dims != std::vector<int64_t>{1, 0} || view.args.empty() ||
      !view.args[0].is_value()) {
    return -1;
  }
  const int weight = view.args[0].value;
  const graph::TensorMeta& x = graph.value(node.args[0].value).meta;
  const graph::TensorMeta& w = graph.value(weight).meta;
  const graph::TensorMeta& p = graph.value(node.outputs[0]).meta;
  if (!is_float(p.dtype) || x.dtype != p.dtype || w.dtype != p.dtype || x.sizes.size() < 2 || w.sizes.size() != 2) {
    return -1;
  }
  return weight;
}

}  // namespace

bool fold_transposes_into_linear_calls(const PrimGraph& graph, PrimGraph* out) {
  std::vector<int> weight(graph.nodes().size(), -1);
  bool any = false;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    weight[n] = transposed_weight(graph, graph.node(n));
    any = any || weight[n] >= 0;
  }
  if (!any) return false;
  const base::PyRef linear = linear_function();
  auto action = [&](size_t n) { return weight[n] >= 0 ? NodeAction::Replace : NodeAction::Copy; };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const PrimNode& node = graph.node(n);
    return b.extern_call(linear.get(), "linear",
                         {graph::Arg::of_node(map[node.args[0].value]), graph::Arg::of_node(map[weight[n]])}, {},
                         {graph.value(node.outputs[0]).meta}, /*pure=*/true)
        .at(0);
  };
  return rewrite_nodes(graph, action, replace, out);
}

bool fold_bias_into_matmuls(const PrimGraph& graph, PrimGraph* out) {
  const std::vector<int> uses = use_counts(graph);
  // The matmul nodes folded into their add, and each qualifying add's matmul side.
  std::vector<bool> folded(graph.nodes().size(), false);
  std::vector<int> side(graph.nodes().size(), -1);
  bool any = false;
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    side[n] = matmul_operand(graph, graph.node(n), uses);
    if (side[n] < 0) continue;
    folded[graph.value(graph.node(n).args[side[n]].value).node] = true;
    any = true;
  }
  if (!any) return false;
  const base::PyRef linear = linear_function();
  auto action = [&](size_t n) {
    return folded[n] ? NodeAction::Drop : side[n] < 0 ? NodeAction::Copy : NodeAction::Replace;
  };
  auto replace = [&](prims::PrimBuilder& b, size_t n, const std::vector<int>& map) {
    const PrimNode& node = graph.node(n);
    const PrimNode& mm = graph.node(graph.value(node.args[side[n]].value).node);
    const int weight = b.permute(map[mm.args[1].value], {1, 0});
    const int bias = map[node.args[1 - side[n]].value];
    return b.extern_call(linear.get(), "linear",
                         {graph::Arg::of_node(map[mm.args[0].value]), graph::Arg::of_node(weight),
                          graph::Arg::of_node(bias)},
                         {}, {graph.value(node.outputs[0]).meta}, /*pure=*/true)
        .at(0);
  };
  return rewrite_nodes(graph, action, replace, out);
}

}  // namespace kiln::inductor
