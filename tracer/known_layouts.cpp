#include "tracer/known_layouts.h"

#include <string_view>
#include <unordered_set>

namespace kiln::tracer {

// Note [Layouts the trace can answer]
// Tensor.stride() and is_contiguous() of a value the graph computed read
// its fake's strides, which are the real ones only where torch computes a
// layout in code the meta device shares with CPU and CUDA: views and
// reshapes (the base's strides decide), copies and conversions (contiguous
// or the input's format), TensorIterator's elementwise ops, matmuls and
// linear layers (fresh contiguous results), constant padding. A value made
// by such ops alone from graph inputs (whose strides are guarded) has its
// real layout; one that passed through anything else (attention, whose
// flash kernels lay results out transposed; normalization, pooling and
// convolutions, whose CUDA kernels follow the input's memory format;
// custom ops) may not, and asking stays a break. Longformer builds its
// sliding windows with as_strided over `hidden_states.stride()` of a
// reshaped projection (24 breaks a forward before).

namespace {

bool follows_known_ops(std::string_view name) {
  // Python's operators on tensors: TensorIterator's elementwise ops, their
  // in-place forms, matmul and indexing.
  if (name.starts_with("operator.")) return true;
  static const std::unordered_set<std::string_view> kOps = {
      // views, reshapes, copies, conversions
      "Tensor.view", "Tensor.view_as", "Tensor.reshape", "Tensor.reshape_as", "torch.reshape", "Tensor.transpose",
      "torch.transpose", "Tensor.permute", "torch.permute", "Tensor.unsqueeze", "torch.unsqueeze", "Tensor.squeeze",
      "torch.squeeze", "Tensor.flatten", "torch.flatten", "Tensor.unflatten", "Tensor.expand", "Tensor.expand_as",
      "Tensor.narrow", "torch.narrow", "operator.getitem", "Tensor.select", "Tensor.contiguous", "Tensor.t",
      "Tensor.movedim", "torch.movedim", "Tensor.swapaxes", "Tensor.as_strided", "Tensor.clone", "torch.clone",
      "Tensor.to", "Tensor.float", "Tensor.half", "Tensor.bfloat16", "Tensor.type_as", "Tensor.chunk",
      "Tensor.split", "torch.chunk", "torch.split", "Tensor.unbind", "torch.unbind",
      // elementwise
      "Tensor.add", "Tensor.sub", "Tensor.mul", "Tensor.div", "torch.add", "torch.sub", "torch.mul", "torch.div",
      "Tensor.eq", "Tensor.ne", "Tensor.lt", "Tensor.le", "Tensor.gt", "Tensor.ge", "torch.eq", "torch.ne",
      "torch.lt", "torch.le", "torch.gt", "torch.ge", "Tensor.logical_not", "torch.logical_not", "Tensor.abs",
      "torch.abs", "Tensor.neg", "Tensor.sqrt", "torch.sqrt", "Tensor.rsqrt", "torch.rsqrt", "Tensor.pow",
      "torch.pow", "Tensor.exp", "Tensor.log", "torch.log", "Tensor.clamp", "torch.clamp", "Tensor.long",
      "Tensor.int", "Tensor.bool", "Tensor.double", "Tensor.type",
      "Tensor.masked_fill", "torch.where", "torch.tanh", "torch.sigmoid", "torch.exp", "F.relu", "F.gelu", "F.silu",
      "torch.softmax", "F.softmax", "Tensor.softmax", "torch.masked_fill", "F.dropout",
      // in place: the written tensor keeps its layout
      "Tensor.add_", "Tensor.sub_",
      "Tensor.mul_", "Tensor.div_", "Tensor.masked_fill_",
      // fresh contiguous results
      "F.linear", "torch.matmul", "operator.matmul", "torch.bmm", "Tensor.bmm", "torch.einsum", "F.pad",
      "Tensor.new_ones", "Tensor.new_zeros", "Tensor.new_full", "Tensor.new_empty", "torch.zeros", "torch.ones",
      "torch.full", "torch.empty", "torch.arange", "torch.zeros_like", "torch.ones_like", "torch.full_like",
      "Tensor.tril", "Tensor.triu", "torch.tril", "torch.triu", "Tensor.flip", "torch.flip", "torch.cat",
      "torch.stack", "F.layer_norm", "F.embedding",
  };
  return kOps.count(name) != 0;
}

bool known(const graph::Graph& graph, int id, std::vector<signed char>& memo, std::string* unknown);

bool args_known(const graph::Graph& graph, const graph::Arg& arg, std::vector<signed char>& memo,
                std::string* unknown) {
  if (arg.kind == graph::Arg::Kind::Node) return known(graph, arg.node, memo, unknown);
  for (const graph::Arg& item : arg.items) {
    if (!args_known(graph, item, memo, unknown)) return false;
  }
  return true;
}

bool known(const graph::Graph& graph, int id, std::vector<signed char>& memo, std::string* unknown) {
  if (memo[id] >= 0) return memo[id] != 0;
  const graph::Node& node = graph.node(id);
  bool ok = node.kind == graph::NodeKind::Input;
  if (!ok && follows_known_ops(node.target_name)) {
    ok = true;
    for (const graph::Arg& arg : node.args) ok = ok && args_known(graph, arg, memo, unknown);
    for (const auto& [name, arg] : node.kwargs) ok = ok && args_known(graph, arg, memo, unknown);
  } else if (!ok && unknown && unknown->empty()) {
    *unknown = node.target_name;
  }
  memo[id] = ok ? 1 : 0;
  return ok;
}

}  // namespace

bool layout_is_known(const graph::Graph& graph, int id, std::string* unknown) {
  if (id < 0 || id >= static_cast<int>(graph.nodes().size())) return false;
  std::vector<signed char> memo(graph.nodes().size(), -1);
  return known(graph, id, memo, unknown);
}

}  // namespace kiln::tracer
