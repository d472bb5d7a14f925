#include "inductor/lower_pointwise.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "prims/pointwise_meta.h"
#include "prims/type_promotion.h"
#include "prims/view_meta.h"

namespace kiln::inductor {
namespace {

using prims::Family;
using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

// Note [Pointwise fusion]
// Nodes are visited last to first. An elementwise node not yet in a group
// starts one; a node's operand joins its consumer's group when the operand
// is made by an elementwise node or a foldable view, is not a graph output,
// and every use of it is in that group (so no intermediate is needed
// outside and each group has one result). A group is one kernel that
// iterates over its result's sizes, recomputing broadcast intermediates per
// point (cheap for elementwise work; what inductor does too). Views whose
// index math is not a per-dim map (a view/reshape that splits or merges
// dims) fold only directly over a kernel input, where their own strides
// say where each element is; the node making their input is not absorbed.

// The prims kernels compute, as kernel ops.
std::optional<UnaryOp> unary_op(Prim prim) {
  switch (prim) {
#define KILN_UNARY_CASE(name, text, floating) \
  case Prim::name: return UnaryOp::name;
    KILN_KERNEL_UNARY_OPS(KILN_UNARY_CASE)
#undef KILN_UNARY_CASE
    default: return std::nullopt;
  }
}

std::optional<BinaryOp> binary_op(Prim prim) {
  switch (prim) {
#define KILN_BINARY_CASE(name, text, floating) \
  case Prim::name: return BinaryOp::name;
    KILN_KERNEL_BINARY_OPS(KILN_BINARY_CASE)
#undef KILN_BINARY_CASE
    default: return std::nullopt;
  }
}

std::optional<CompareOp> compare_op(Prim prim) {
  switch (prim) {
#define KILN_COMPARE_CASE(name, text) \
  case Prim::name: return CompareOp::name;
    KILN_KERNEL_COMPARE_OPS(KILN_COMPARE_CASE)
#undef KILN_COMPARE_CASE
    default: return std::nullopt;
  }
}

bool kernel_dtype(DType d) { return item_size(d) > 0; }

// The dtype a value is computed in: low-precision floats in float32.
DType compute_dtype(DType d) {
  return (d == DType::Float16 || d == DType::BFloat16) ? DType::Float32 : d;
}

bool is_elementwise(const PrimGraph& graph, const PrimNode& node) {
  const bool op_known = unary_op(node.prim) || binary_op(node.prim) || compare_op(node.prim) ||
                        node.prim == Prim::Where || node.prim == Prim::ConvertElementType;
  if (!op_known || node.outputs.size() != 1) return false;
  if (!kernel_dtype(graph.value(node.outputs[0]).meta.dtype)) return false;
  for (const prims::PrimArg& arg : node.args) {
    if (arg.is_value() && !kernel_dtype(graph.value(arg.value).meta.dtype)) return false;
    if (!arg.is_value() && arg.scalar.kind == prims::ScalarKind::Complex) return false;
  }
  return true;
}

// The non-size-1 sizes, in order.
std::vector<int64_t> non_unit(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> kept;
  for (int64_t s : sizes) {
    if (s != 1) kept.push_back(s);
  }
  return kept;
}

// True for a view/reshape that only adds or removes size-1 dims.
bool only_unit_dims_change(const PrimGraph& graph, const PrimNode& node) {
  const auto& in = graph.value(node.args[0].value).meta.sizes;
  const auto& out = graph.value(node.outputs[0]).meta.sizes;
  return non_unit(in) == non_unit(out);
}

bool is_view_node(const PrimNode& node) {
  switch (node.prim) {
    case Prim::Expand:
    case Prim::Permute:
    case Prim::Squeeze:
    case Prim::Unsqueeze:
    case Prim::View:
    case Prim::Reshape: return true;
    default: return false;
  }
}

// A view whose input must be a kernel input (Note [Pointwise fusion]);
// nullopt when the view cannot fold at all (a reshape that copies).
std::optional<bool> view_needs_leaf_input(const PrimGraph& graph, const PrimNode& node) {
  if (node.prim != Prim::View && node.prim != Prim::Reshape) return false;
  if (only_unit_dims_change(graph, node)) return false;
  const graph::TensorMeta& in = graph.value(node.args[0].value).meta;
  if (!prims::view_strides(in, graph.value(node.outputs[0]).meta.sizes)) return std::nullopt;
  return true;
}

// Builds one group's kernel by evaluating its result at the iteration
// index, following each value back through index maps.
class Lowering {
 public:
  Lowering(const PrimGraph& graph, const PointwiseGroup& group)
      : graph_(graph), members_(group.nodes.begin(), group.nodes.end()) {}

  LoweredKernel run(int root_node) {
    const PrimNode& root = graph_.node(root_node);
    const int result = root.outputs[0];
    const graph::TensorMeta& meta = graph_.value(result).meta;
    out_.kernel.name = prims::prim_name(root.prim);
    out_.kernel.sizes = meta.sizes;
    IndexMap identity(meta.sizes.size());
    for (size_t d = 0; d < identity.size(); ++d) identity[d] = static_cast<int>(d);
    const int value = emit(result, identity);
    out_.kernel.add_output(KernelOutput{meta.dtype, meta.strides, value});
    out_.outputs.push_back(result);
    const std::string problem = verify(out_.kernel);
    if (!problem.empty()) throw LoweringError("lowered kernel is invalid: " + problem);
    return std::move(out_);
  }

 private:
  // Per dim of a value: the iteration dim its index follows, or -1 when the
  // index is always 0 (a broadcast dim).
  using IndexMap = std::vector<int>;

  bool in_group(int value) const {
    const int node = graph_.value(value).node;
    return node >= 0 && members_.count(node) > 0;
  }

  // A load of a value the group does not make, with `strides`/`offset` in
  // that value's storage (its own strides unless a folded view says).
  int load(int value, const std::vector<int64_t>& strides, int64_t offset, const IndexMap& map) {
    KernelInput input;
    input.dtype = graph_.value(value).meta.dtype;
    input.strides.assign(out_.kernel.sizes.size(), 0);
    for (size_t j = 0; j < map.size(); ++j) {
      if (map[j] >= 0) input.strides[map[j]] += strides[j];
    }
    input.offset = offset;
    const int index = out_.kernel.add_input(input);
    out_.inputs.push_back(value);
    const int loaded = out_.kernel.load(index);
    return cast_to(loaded, compute_dtype(input.dtype));
  }

  int cast_to(int expr, DType dtype) {
    return out_.kernel.exprs[expr].dtype == dtype ? expr : out_.kernel.cast(expr, dtype);
  }

  // An operand of an elementwise node whose result has `sizes`, at `map`.
  int operand(const prims::PrimArg& arg, const std::vector<int64_t>& sizes, const IndexMap& map,
              DType dtype) {
    if (!arg.is_value()) {
      const prims::Scalar& s = arg.scalar;
      const double v = s.kind == prims::ScalarKind::Float ? s.real : static_cast<double>(s.integer);
      return out_.kernel.constant(dtype, v);
    }
    // Broadcasting: dims align from the right; size-1 dims stay at 0.
    const auto& in_sizes = graph_.value(arg.value).meta.sizes;
    IndexMap in_map(in_sizes.size());
    const size_t lead = sizes.size() - in_sizes.size();
    for (size_t j = 0; j < in_sizes.size(); ++j) {
      in_map[j] = (in_sizes[j] == 1 && sizes[lead + j] != 1) ? -1 : map[lead + j];
    }
    return cast_to(emit(arg.value, in_map), dtype);
  }

  int emit(int value, const IndexMap& map) {
    auto key = std::make_pair(value, map);
    auto found = memo_.find(key);
    if (found != memo_.end()) return found->second;
    const int expr = in_group(value) ? emit_node(value, map)
                                     : load(value, graph_.value(value).meta.strides, 0, map);
    memo_.emplace(std::move(key), expr);
    return expr;
  }

  int emit_node(int value, const IndexMap& map) {
    const PrimValue& v = graph_.value(value);
    const PrimNode& node = graph_.node(v.node);
    if (is_view_node(node)) return emit_view(node, map);
    const std::vector<int64_t>& sizes = v.meta.sizes;
    if (node.prim == Prim::ConvertElementType) {
      const DType target = *node.attrs.dtype;
      const int in = operand(node.args[0], sizes, map, compute_dtype(graph_.value(node.args[0].value).meta.dtype));
      // A conversion to a low-precision float rounds, even inside a kernel.
      if (compute_dtype(target) != target) return cast_to(out_.kernel.cast(in, target), DType::Float32);
      return cast_to(in, target);
    }
    std::vector<prims::Operand> operands;
    for (const prims::PrimArg& arg : node.args) {
      operands.push_back(arg.is_value() ? prims::Operand::of(graph_.value(arg.value).meta)
                                        : prims::Operand::of(arg.scalar.kind));
    }
    const prims::ElementwiseDTypes dtypes = prims::pointwise_dtypes(node.prim, operands);
    const DType result = compute_dtype(dtypes.result);
    if (node.prim == Prim::Where) {
      // Operands are emitted in order (locals: argument order is unspecified).
      const int cond = operand(node.args[0], sizes, map, DType::Bool);
      const int a = operand(node.args[1], sizes, map, result);
      const int b = operand(node.args[2], sizes, map, result);
      return out_.kernel.select(cond, a, b);
    }
    if (auto op = compare_op(node.prim)) {
      const DType common = compute_dtype(dtypes.common);
      const int a = operand(node.args[0], sizes, map, common);
      const int b = operand(node.args[1], sizes, map, common);
      return out_.kernel.compare(*op, a, b);
    }
    if (auto op = unary_op(node.prim)) {
      // isnan of an integer is false; logical_not reads its operand as bool.
      if (*op == UnaryOp::LogicalNot) {
        return out_.kernel.unary(*op, operand(node.args[0], sizes, map, DType::Bool));
      }
      if (*op == UnaryOp::IsNan) {
        const DType in = compute_dtype(dtypes.common);
        if (in != DType::Float32 && in != DType::Float64) return out_.kernel.constant(DType::Bool, 0);
        return out_.kernel.unary(*op, operand(node.args[0], sizes, map, in));
      }
      return out_.kernel.unary(*op, operand(node.args[0], sizes, map, result));
    }
    const BinaryOp op = *binary_op(node.prim);
    const bool logical = op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr || op == BinaryOp::LogicalXor;
    const DType in = logical ? DType::Bool : result;
    const int a = operand(node.args[0], sizes, map, in);
    const int b = operand(node.args[1], sizes, map, in);
    return out_.kernel.binary(op, a, b);
  }

  // A folded view: the input's index map from the view's.
  int emit_view(const PrimNode& node, const IndexMap& map) {
    const int input = node.args[0].value;
    const graph::TensorMeta& in = graph_.value(input).meta;
    const graph::TensorMeta& out = graph_.value(node.outputs[0]).meta;
    IndexMap in_map(in.sizes.size(), -1);
    switch (node.prim) {
      case Prim::Expand: {
        const size_t lead = out.sizes.size() - in.sizes.size();
        for (size_t j = 0; j < in.sizes.size(); ++j) {
          in_map[j] = in.sizes[j] == out.sizes[lead + j] ? map[lead + j] : -1;
        }
        break;
      }
      case Prim::Permute:
        for (size_t i = 0; i < node.attrs.dims.size(); ++i) in_map[node.attrs.dims[i]] = map[i];
        break;
      default: {
        if (!only_unit_dims_change(graph_, node)) {
          // Over a kernel input: load through the view's own strides.
          if (in_group(input)) throw LoweringError("a view that splits or merges dims of a computed value");
          auto strides = prims::view_strides(in, out.sizes);
          if (!strides) throw LoweringError("a reshape that copies");
          return load(input, *strides, 0, map);
        }
        // squeeze, unsqueeze, view/reshape adding or dropping size-1 dims:
        // match the non-size-1 dims in order; size-1 input dims index 0.
        size_t i = 0;
        for (size_t j = 0; j < in.sizes.size(); ++j) {
          if (in.sizes[j] == 1) continue;
          while (out.sizes[i] == 1) ++i;
          in_map[j] = map[i++];
        }
        break;
      }
    }
    return emit(input, in_map);
  }

  using PrimValue = prims::PrimValue;
  const PrimGraph& graph_;
  std::set<int> members_;
  LoweredKernel out_;
  std::map<std::pair<int, IndexMap>, int> memo_;
};

}  // namespace

std::vector<PointwiseGroup> find_pointwise_groups(const PrimGraph& graph) {
  const int node_count = static_cast<int>(graph.nodes().size());
  std::vector<std::vector<int>> users(graph.values().size());
  for (int n = 0; n < node_count; ++n) {
    for (const prims::PrimArg& arg : graph.node(n).args) {
      if (arg.is_value()) users[arg.value].push_back(n);
    }
  }
  std::set<int> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  std::vector<int> group_of(node_count, -1);
  std::vector<bool> leaf_view(node_count, false);
  int groups = 0;
  for (int n = node_count - 1; n >= 0; --n) {
    const PrimNode& node = graph.node(n);
    if (group_of[n] < 0) {
      if (!is_elementwise(graph, node)) continue;
      group_of[n] = groups++;
    }
    if (leaf_view[n]) continue;
    for (const prims::PrimArg& arg : node.args) {
      if (!arg.is_value()) continue;
      const int producer = graph.value(arg.value).node;
      if (producer < 0 || group_of[producer] >= 0 || graph_outputs.count(arg.value)) continue;
      const PrimNode& made_by = graph.node(producer);
      std::optional<bool> leaf = false;
      if (is_view_node(made_by)) {
        leaf = view_needs_leaf_input(graph, made_by);
        if (!leaf) continue;
      } else if (!is_elementwise(graph, made_by)) {
        continue;
      }
      const bool all_inside = std::all_of(users[arg.value].begin(), users[arg.value].end(),
                                          [&](int user) { return group_of[user] == group_of[n]; });
      if (!all_inside) continue;
      group_of[producer] = group_of[n];
      leaf_view[producer] = *leaf;
    }
  }
  std::vector<PointwiseGroup> result(groups);
  for (int n = 0; n < node_count; ++n) {
    if (group_of[n] >= 0) result[group_of[n]].nodes.push_back(n);
  }
  // Numbered from the last node back; report them in graph order.
  std::sort(result.begin(), result.end(),
            [](const PointwiseGroup& a, const PointwiseGroup& b) { return a.nodes.back() < b.nodes.back(); });
  return result;
}

LoweredKernel lower_pointwise(const PrimGraph& graph, const PointwiseGroup& group) {
  if (group.nodes.empty()) throw LoweringError("an empty group");
  const int root = group.nodes.back();
  if (!is_elementwise(graph, graph.node(root))) {
    throw LoweringError(std::string("the group's result is made by ") + prims::prim_name(graph.node(root).prim) +
                        ", not an elementwise prim");
  }
  return Lowering(graph, group).run(root);
}

}  // namespace kiln::inductor
