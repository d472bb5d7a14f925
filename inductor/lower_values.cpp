#include "inductor/lower_values.h"

#include <algorithm>

#include "prims/pointwise_meta.h"
#include "prims/type_promotion.h"
#include "prims/view_meta.h"

namespace kiln::inductor {

using prims::Family;
using prims::Prim;
using prims::PrimGraph;
using prims::PrimNode;

namespace {

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
    KILN_KERNEL_PRIM_BINARY_OPS(KILN_BINARY_CASE)
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

}  // namespace

DType compute_dtype(DType d) {
  return (d == DType::Float16 || d == DType::BFloat16) ? DType::Float32 : d;
}

bool is_elementwise(const PrimGraph& graph, const PrimNode& node) {
  const bool op_known = unary_op(node.prim) || binary_op(node.prim) || compare_op(node.prim) ||
                        node.prim == Prim::Where || node.prim == Prim::ConvertElementType ||
                        node.prim == Prim::Clone;
  if (!op_known || node.outputs.size() != 1) return false;
  if (!kernel_dtype(graph.value(node.outputs[0]).meta.dtype)) return false;
  for (const prims::PrimArg& arg : node.args) {
    if (arg.is_value() && !kernel_dtype(graph.value(arg.value).meta.dtype)) return false;
    if (!arg.is_value() && arg.scalar.kind == prims::ScalarKind::Complex) return false;
  }
  return true;
}

bool is_view_node(const PrimNode& node) {
  switch (node.prim) {
    case Prim::Expand:
    case Prim::Permute:
    case Prim::Squeeze:
    case Prim::Unsqueeze:
    case Prim::View:
    case Prim::Slice:
    case Prim::Reshape: return true;
    default: return false;
  }
}

// Note [Cat in kernels]
// A cat joins the kernel that reads it: at a point, its value is piece k's
// at the index along the cat dim minus k's start, for the k whose range
// holds the index, a chain of selects over every piece. Kernels evaluate
// both sides of a select, so each piece is read at its index clamped into
// its own range (Note [Loads at computed indices]): every point reads
// every piece, so only cats of few pieces join (kMaxCatPieces; DenseNet's
// many-piece cats stay torch's call). The clamped index reaches a piece's
// loads as an IndexTerm carrying an expression, through views and
// pointwise nodes alike, so torch.roll (a cat of two slices per dim, the
// second roll's slices cut from the first's cat) and rotate_half (a cat of
// a negated slice and a slice) are one kernel with what reads them: no
// copy through memory, no cat launch. A cat no kernel reads stays torch's
// call (it never starts a group): a copy it is either way. Fills join the
// same way, as constants: a slice's gradient is a cat of zero fills and
// the gradient (autograd/derivatives_view.cpp), so a roll's backward is one
// kernel summing two such cats, not two scatters into zeros.
constexpr size_t kMaxCatPieces = 4;

bool joins_readers(const PrimGraph& graph, const PrimNode& node) {
  if (node.outputs.size() != 1) return false;
  const graph::TensorMeta& out = graph.value(node.outputs[0]).meta;
  if (node.prim == Prim::Full) return kernel_dtype(out.dtype) && node.attrs.value.kind != prims::ScalarKind::Complex;
  if (node.prim != Prim::Cat) return false;
  if (!kernel_dtype(out.dtype) || node.args.size() > kMaxCatPieces) return false;
  for (const prims::PrimArg& arg : node.args) {
    if (!arg.is_value()) return false;
    const graph::TensorMeta& piece = graph.value(arg.value).meta;
    // Legacy 1-dim empties join any rank; a kernel indexes pieces by dim.
    if (piece.sizes.size() != out.sizes.size() || !kernel_dtype(piece.dtype)) return false;
  }
  return true;
}

bool view_folds(const PrimGraph& graph, const PrimNode& node) {
  if (node.prim != Prim::View && node.prim != Prim::Reshape) return true;
  if (only_unit_dims_change(graph, node)) return true;
  const std::vector<int64_t>& in = graph.value(node.args[0].value).meta.sizes;
  return std::find(in.begin(), in.end(), 0) == in.end();
}


bool is_kernel_reduction(const PrimGraph& graph, const PrimNode& node) {
  switch (node.prim) {
    case Prim::Sum:
    case Prim::Prod:
    case Prim::Amax:
    case Prim::Amin:
    case Prim::Argmax:
    case Prim::Argmin:
    case Prim::VarMean: break;
    default: return false;
  }
  if (node.args.size() != 1 || !node.args[0].is_value()) return false;
  const DType in = graph.value(node.args[0].value).meta.dtype;
  if (!kernel_dtype(in)) return false;
  if ((node.prim == Prim::Argmax || node.prim == Prim::Argmin) && in == DType::Bool) return false;
  for (int out : node.outputs) {
    if (!kernel_dtype(graph.value(out).meta.dtype)) return false;
  }
  return true;
}

std::vector<int64_t> reduction_dims(const PrimGraph& graph, const PrimNode& node) {
  const int64_t rank = static_cast<int64_t>(graph.value(node.args[0].value).meta.sizes.size());
  std::vector<int64_t> dims = node.attrs.dims;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

ValueLowering::IndexMap ValueLowering::identity(size_t rank) {
  IndexMap map(rank);
  for (size_t d = 0; d < rank; ++d) map[d] = IndexTerm::along(static_cast<int>(d));
  return map;
}

ValueLowering::ValueLowering(const PrimGraph& graph, const std::vector<int>& nodes, LoweredKernel* out)
    : graph_(graph), members_(nodes.begin(), nodes.end()), out_(out) {}

bool ValueLowering::in_group(int value) const {
    const int node = graph_.value(value).node;
    return node >= 0 && members_.count(node) > 0;
  }

int ValueLowering::load(int value, const std::vector<int64_t>& strides, int64_t offset, const IndexMap& map) {
    KernelInput input;
    input.dtype = graph_.value(value).meta.dtype;
    input.strides.assign(out_->kernel.sizes.size(), 0);
    std::vector<int> indices;
    std::vector<int64_t> index_strides;
    std::vector<std::pair<int, int64_t>> computed;  // (expression, stride)
    for (size_t j = 0; j < map.size(); ++j) {
      offset += map[j].offset * strides[j];
      if (map[j].dim >= 0) input.strides[map[j].dim] += strides[j];
      if (map[j].expr >= 0) computed.emplace_back(map[j].expr, strides[j]);
    }
    fold_digits(&computed);
    for (const auto& [expr, stride] : computed) {
      const Expr& e = out_->kernel.exprs[expr];
      if (e.kind == ExprKind::Index) {  // affine after all: a plain strided load
        for (size_t d = 0; d < e.strides.size(); ++d) input.strides[d] += e.strides[d] * stride;
        continue;
      }
      indices.push_back(expr);
      index_strides.push_back(stride);
    }
    input.offset = offset;
    const int index = out_->kernel.add_input(input);
    out_->inputs.push_back(value);
    const int loaded = indices.empty() ? out_->kernel.load(index)
                                       : out_->kernel.load_at(index, std::move(indices), std::move(index_strides));
    return cast_to(loaded, compute_dtype(input.dtype));
  }

int ValueLowering::cast_to(int expr, DType dtype) {
    return out_->kernel.exprs[expr].dtype == dtype ? expr : out_->kernel.cast(expr, dtype);
  }

int ValueLowering::operand(const prims::PrimArg& arg, const std::vector<int64_t>& sizes, const IndexMap& map,
              DType dtype) {
    if (!arg.is_value()) {
      const prims::Scalar& s = arg.scalar;
      const double v = s.kind == prims::ScalarKind::Float ? s.real : static_cast<double>(s.integer);
      return out_->kernel.constant(dtype, v);
    }
    // Broadcasting: dims align from the right; size-1 dims stay at 0.
    const auto& in_sizes = graph_.value(arg.value).meta.sizes;
    IndexMap in_map(in_sizes.size());
    const size_t lead = sizes.size() - in_sizes.size();
    for (size_t j = 0; j < in_sizes.size(); ++j) {
      if (in_sizes[j] != 1) in_map[j] = map[lead + j];
    }
    return cast_to(emit(arg.value, in_map), dtype);
  }

int ValueLowering::emit(int value, const IndexMap& map) {
    auto key = std::make_pair(value, map);
    auto found = memo_.find(key);
    if (found != memo_.end()) return found->second;
    const int expr = in_group(value) ? emit_node(value, map)
                                     : load(value, graph_.value(value).meta.strides, 0, map);
    memo_.emplace(std::move(key), expr);
    return expr;
  }

int ValueLowering::emit_node(int value, const IndexMap& map) {
    const prims::PrimValue& v = graph_.value(value);
    const PrimNode& node = graph_.node(v.node);
    if (is_view_node(node)) return emit_view(node, map);
    if (node.prim == Prim::Cat) return emit_cat(node, map);
    const int expr = node.prim == Prim::Full                 ? emit_fill(node)
                     : is_kernel_reduction(graph_, node) ? emit_reduction(value, map)
                                                        : emit_pointwise(value, map);
    // Eager rounds every op's result to its dtype; a kernel computing a
    // float16/bfloat16 value in float32 rounds it too, so fused results
    // agree with eager (a conversion has rounded already).
    const DType stored = v.meta.dtype;
    if (compute_dtype(stored) != stored && node.prim != Prim::ConvertElementType && node.prim != Prim::Clone) {
      return cast_to(out_->kernel.cast(expr, stored), DType::Float32);
    }
    return expr;
  }

int ValueLowering::emit_pointwise(int value, const IndexMap& map) {
    const prims::PrimValue& v = graph_.value(value);
    const PrimNode& node = graph_.node(v.node);
    const std::vector<int64_t>& sizes = v.meta.sizes;
    if (node.prim == Prim::ConvertElementType) {
      const DType target = *node.attrs.dtype;
      const int in = operand(node.args[0], sizes, map, compute_dtype(graph_.value(node.args[0].value).meta.dtype));
      // A conversion to a low-precision float rounds, even inside a kernel.
      if (compute_dtype(target) != target) return cast_to(out_->kernel.cast(in, target), DType::Float32);
      return cast_to(in, target);
    }
    // A clone is its input, stored in the clone's layout.
    if (node.prim == Prim::Clone) {
      return operand(node.args[0], sizes, map, compute_dtype(graph_.value(node.args[0].value).meta.dtype));
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
      return out_->kernel.select(cond, a, b);
    }
    if (auto op = compare_op(node.prim)) {
      const DType common = compute_dtype(dtypes.common);
      const int a = operand(node.args[0], sizes, map, common);
      const int b = operand(node.args[1], sizes, map, common);
      return out_->kernel.compare(*op, a, b);
    }
    if (auto op = unary_op(node.prim)) {
      // isnan of an integer is false; logical_not reads its operand as bool.
      if (*op == UnaryOp::LogicalNot) {
        return out_->kernel.unary(*op, operand(node.args[0], sizes, map, DType::Bool));
      }
      if (*op == UnaryOp::IsNan) {
        const DType in = compute_dtype(dtypes.common);
        if (in != DType::Float32 && in != DType::Float64) return out_->kernel.constant(DType::Bool, 0);
        return out_->kernel.unary(*op, operand(node.args[0], sizes, map, in));
      }
      return out_->kernel.unary(*op, operand(node.args[0], sizes, map, result));
    }
    const BinaryOp op = *binary_op(node.prim);
    if (op == BinaryOp::Pow && !node.args[1].is_value() && (result == DType::Float32 || result == DType::Float64)) {
      if (std::optional<int> special = emit_pow_special(operand(node.args[0], sizes, map, result),
                                                        node.args[1].scalar.as_double(), result)) {
        return *special;
      }
    }
    const bool logical = op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr || op == BinaryOp::LogicalXor;
    const DType in = logical ? DType::Bool : result;
    const int a = operand(node.args[0], sizes, map, in);
    const int b = operand(node.args[1], sizes, map, in);
    return out_->kernel.binary(op, a, b);
  }

// Note [Pow by a constant]
// torch's CPU kernel computes x ** c for c in {2, 3, 0.5, -0.5, -1, -2} as
// products, square roots and reciprocals, not with pow(); kernels do the
// same, so their results agree with eager to the bit (and run faster). One
// exception: torch 2.11's AVX-512 kernels take square roots that are not
// correctly rounded (1 ulp off on some inputs); kiln's are. torch's pow
// itself makes x ** 1 a copy of x and x ** 0 a fill of ones (NaN ** 0 is
// 1), before any kernel; so do kernels. x ** 1 is common: the gradient of
// x ** 2 is 2 * x ** 1 (RMSNorm's backward), and through pow() it cost
// 110 us of a 2 ms Llama training step per norm on the dev machine.
std::optional<int> ValueLowering::emit_pow_special(int x, double exponent, DType dtype) {
  Kernel& k = out_->kernel;
  auto one = [&] { return k.constant(dtype, 1.0); };
  if (exponent == 1) return x;
  if (exponent == 0) return one();
  if (exponent == 2) return k.binary(BinaryOp::Mul, x, x);
  if (exponent == 3) return k.binary(BinaryOp::Mul, k.binary(BinaryOp::Mul, x, x), x);
  if (exponent == 0.5) return k.unary(UnaryOp::Sqrt, x);
  if (exponent == -0.5) return k.unary(UnaryOp::Rsqrt, x);
  if (exponent == -1) return k.binary(BinaryOp::Div, one(), x);
  if (exponent == -2) return k.binary(BinaryOp::Div, one(), k.binary(BinaryOp::Mul, x, x));
  return std::nullopt;
}

int ValueLowering::emit_view(const PrimNode& node, const IndexMap& map) {
    const int input = node.args[0].value;
    const graph::TensorMeta& in = graph_.value(input).meta;
    const graph::TensorMeta& out = graph_.value(node.outputs[0]).meta;
    IndexMap in_map(in.sizes.size());
    switch (node.prim) {
      case Prim::Expand: {
        const size_t lead = out.sizes.size() - in.sizes.size();
        for (size_t j = 0; j < in.sizes.size(); ++j) {
          if (in.sizes[j] == out.sizes[lead + j]) in_map[j] = map[lead + j];
        }
        break;
      }
      case Prim::Slice: {
        // Index i of the slice is start + i * step of its input.
        in_map = map;
        const int64_t d = node.attrs.dim;
        const int64_t size = in.sizes[d];
        int64_t start = node.attrs.start.value_or(0);
        if (start < 0) start += size;
        start = std::clamp<int64_t>(start, 0, size);
        const int64_t step = node.attrs.step;
        IndexTerm& term = in_map[d];
        if (step == 1) {
          term.offset += start;
        } else {
          Kernel& k = out_->kernel;
          int at = index_of(map[d]);
          if (step != 1) at = k.binary(BinaryOp::Mul, at, k.constant(DType::Int64, static_cast<double>(step)));
          if (start != 0) at = k.binary(BinaryOp::Add, at, k.constant(DType::Int64, static_cast<double>(start)));
          term = IndexTerm{-1, 0, at};
        }
        break;
      }
      case Prim::Permute:
        for (size_t i = 0; i < node.attrs.dims.size(); ++i) in_map[node.attrs.dims[i]] = map[i];
        break;
      default: {
        if (!only_unit_dims_change(graph_, node)) {
          // Over a kernel input torch can view: load through the view's own strides.
          auto strides = in_group(input) ? std::nullopt : prims::view_strides(in, out.sizes);
          if (strides) return load(input, *strides, 0, map);
          std::optional<IndexMap> in_map = reshape_input_map(in, out, map);
          if (!in_map) throw LoweringError("a reshape of an empty value");
          return emit(input, *in_map);
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

// Note [Reduction lowering]
// A reduction node's value is a Reduce of its input evaluated over the
// kernel's iteration space: lower_group makes the space the reductions'
// input shape and their dims its reduced dims (every reduction of a group
// must agree), so the input is emitted at the identity map. A reduction's
// value can only be read at its own kept point (a map that broadcasts a
// kept dim of size > 1 would ask for another point's result): such a map
// is refused. Sum and prod accumulate in their result's dtype (int64 for
// integer inputs, as torch), amax/amin in the input's; var_mean is two
// reductions: mean = sum(x) / n, then var = sum((x - mean)^2) / max(n -
// correction, 0), the two-pass form (torch uses Welford's; both are exact
// to rounding, two passes is the more accurate). argmax/argmin are two
// reductions as well, both of which vectorize and split: m = max(x) (NaN
// when x holds one), then the smallest Index where x == m (where x is NaN
// when m is; elsewhere the count of reduced points, past every index),
// over an Index counting the reduced dims row-major in the
// input's own dim order (torch's flat index over all dims, or the index
// along the one dim), so the loop order is free. The smallest index is
// torch's first occurrence and its first NaN; a 0-dim input's index is 0.
// (One pass carrying a value and an index does not vectorize: 4x slower
// than torch over 16M floats.)
int ValueLowering::emit_reduction(int value, const IndexMap& map) {
  const PrimNode& node = graph_.node(graph_.value(value).node);
  const int input = node.args[0].value;
  const graph::TensorMeta& in = graph_.value(input).meta;
  Kernel& k = out_->kernel;
  const std::vector<int64_t> dims = reduction_dims(graph_, node);
  const std::vector<int64_t> kernel_dims(k.reduced.begin(), k.reduced.end());
  if (in.sizes != k.sizes || dims != kernel_dims) {
    throw LoweringError(std::string(prims::prim_name(node.prim)) + ": reduces another space than the kernel's");
  }
  // The kept dims, in order, are the output's dims (keepdim: all dims).
  const size_t rank = in.sizes.size();
  size_t j = 0;
  for (size_t d = 0; d < rank; ++d) {
    const bool reduced = std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(d));
    if (reduced && !node.attrs.keepdim) continue;
    const int want = static_cast<int>(d);
    if (!reduced && in.sizes[d] > 1 && !map.at(j).is(want)) {
      throw LoweringError(std::string(prims::prim_name(node.prim)) + ": its result is read at another kept point");
    }
    ++j;
  }
  // Checked before the memo: a result already emitted for its own kept
  // point must not be handed to a read at another one.
  if (auto found = reductions_.find(value); found != reductions_.end()) return found->second;
  const IndexMap identity = ValueLowering::identity(rank);
  int64_t count = 1;
  for (int64_t d : dims) count *= in.sizes[d];
  auto reduce = [&](ReduceOp op, int x) { return k.reduced.empty() ? x : k.reduce(op, x); };
  if (node.prim == Prim::VarMean) {
    const DType dtype = compute_dtype(graph_.value(node.outputs[1]).meta.dtype);
    // Note [Corrected two-pass variance]
    // The plain two-pass form sum((x - m)^2) / d, m = sum(x) / n, misses
    // by the rounding of m: for a row of equal values m is not the value
    // itself, so the variance comes out a tiny positive number where
    // eager's Welford gives exactly 0, and std's gradient there is noise
    // instead of 0. The corrected form (Chan, Golub and LeVeque) adds the
    // sum of the deviations in the same second pass: the mean becomes
    // m + sum(x - m) / n and the variance (sum((x - m)^2) - sum(x - m)^2 / n)
    // / d, exact for equal values (x - m is then one small exact number)
    // and never less accurate than the plain form. Clamped at 0: the two
    // sums may round the difference below it. Exact in exact arithmetic
    // only: summed in another order (a CUDA block's tree) the two terms
    // of a row of equal values can miss each other by one rounding, so a
    // row whose max and min are equal and finite (max - min == 0) is given
    // variance 0 and its value as mean outright, as Welford gives them
    // (the extra max and min ride in the first pass), where a correction
    // is made (torch.var, torch.std: std's gradient divides by it).
    const int x = cast_to(emit(input, identity), dtype);
    const int n = k.constant(dtype, static_cast<double>(count));
    const int rough_mean = k.binary(BinaryOp::Div, reduce(ReduceOp::Sum, x), n);
    const int centered = k.binary(BinaryOp::Sub, x, rough_mean);
    const int deviation = reduce(ReduceOp::Sum, centered);
    const int squares = reduce(ReduceOp::Sum, k.binary(BinaryOp::Mul, centered, centered));
    const int mean = k.binary(BinaryOp::Add, rough_mean, k.binary(BinaryOp::Div, deviation, n));
    const int spread = k.binary(BinaryOp::Sub, squares, k.binary(BinaryOp::Div, k.binary(BinaryOp::Mul, deviation, deviation), n));
    const double divisor = std::max(static_cast<double>(count) - node.attrs.correction, 0.0);
    const int var = k.binary(BinaryOp::Div, k.binary(BinaryOp::Maximum, spread, k.constant(dtype, 0)),
                             k.constant(dtype, divisor));
    // Layer norm and batch norm (correction 0) skip the flat-row rule:
    // their eps dominates a variance one rounding off, and the extra max
    // and min would ride in every normalization kernel.
    if (divisor == 0 || node.attrs.correction == 0) {  // divisor 0: 0 / 0 (or x / 0) as eagerly
      reductions_[node.outputs[0]] = var;
      reductions_[node.outputs[1]] = mean;
      return reductions_.at(value);
    }
    const int highest = reduce(ReduceOp::Max, x);
    const int flat = k.compare(CompareOp::Eq, k.binary(BinaryOp::Sub, highest, reduce(ReduceOp::Min, x)),
                               k.constant(dtype, 0));
    reductions_[node.outputs[0]] = k.select(flat, k.constant(dtype, 0), var);
    reductions_[node.outputs[1]] = k.select(flat, highest, mean);
    return reductions_.at(value);
  }
  if (node.prim == Prim::Argmax || node.prim == Prim::Argmin) {
    const DType dtype = compute_dtype(in.dtype);
    const int x = cast_to(emit(input, identity), dtype);
    if (k.reduced.empty()) return reductions_[value] = k.constant(DType::Int64, 0);
    std::vector<int64_t> strides(rank, 0);
    int64_t step = 1;
    for (auto d = dims.rbegin(); d != dims.rend(); ++d) {
      strides[*d] = step;
      step *= in.sizes[*d];
    }
    const int extreme = k.reduce(node.prim == Prim::Argmax ? ReduceOp::Max : ReduceOp::Min, x);
    int match = k.compare(CompareOp::Eq, x, extreme);
    if (dtype == DType::Float32 || dtype == DType::Float64) {
      const int both_nan = k.binary(BinaryOp::LogicalAnd, k.unary(UnaryOp::IsNan, x), k.unary(UnaryOp::IsNan, extreme));
      match = k.binary(BinaryOp::LogicalOr, match, both_nan);
    }
    const int none = k.constant(DType::Int64, static_cast<double>(step));  // past every index
    const int candidate = k.select(match, k.index(std::move(strides)), none);
    return reductions_[value] = k.reduce(ReduceOp::Min, candidate);
  }
  ReduceOp op = ReduceOp::Sum;
  switch (node.prim) {
    case Prim::Sum: op = ReduceOp::Sum; break;
    case Prim::Prod: op = ReduceOp::Prod; break;
    case Prim::Amax: op = ReduceOp::Max; break;
    case Prim::Amin: op = ReduceOp::Min; break;
    default: throw LoweringError("not a reduction");
  }
  const DType dtype = compute_dtype(graph_.value(value).meta.dtype);
  const int result = reduce(op, cast_to(emit(input, identity), dtype));
  reductions_[value] = result;
  return result;
}

int ValueLowering::index_expr(const std::vector<int64_t>& strides) {
  auto [found, fresh] = index_exprs_.emplace(strides, -1);
  if (fresh) found->second = out_->kernel.index(strides);
  return found->second;
}

int ValueLowering::index_of(const IndexTerm& term) {
  Kernel& k = out_->kernel;
  int at = term.expr;
  if (term.dim >= 0) {
    std::vector<int64_t> strides(k.sizes.size(), 0);
    strides[term.dim] = 1;
    at = index_expr(strides);
  }
  if (at < 0) return k.constant(DType::Int64, static_cast<double>(term.offset));
  if (term.offset == 0) return at;
  return k.binary(BinaryOp::Add, at, k.constant(DType::Int64, static_cast<double>(term.offset)));
}

// A fill's value, in the dtype kernels compute it in (rounded to a
// low-precision dtype by emit_node like any result).
int ValueLowering::emit_fill(const PrimNode& node) {
  const DType dtype = compute_dtype(graph_.value(node.outputs[0]).meta.dtype);
  const prims::Scalar& value = node.attrs.value;
  Expr e;
  e.kind = ExprKind::Constant;
  e.dtype = dtype;
  const bool integral = value.kind == prims::ScalarKind::Int || value.kind == prims::ScalarKind::Bool;
  if (dtype == DType::Float32 || dtype == DType::Float64) {
    e.constant = integral ? static_cast<double>(value.integer) : value.real;
  } else if (dtype == DType::Bool) {
    e.integer = (integral ? value.integer != 0 : value.real != 0) ? 1 : 0;
  } else {
    e.integer = integral ? value.integer : static_cast<int64_t>(value.real);
  }
  return out_->kernel.add(std::move(e));
}

// Note [Reshapes in kernels]
// A view or reshape reads its input at indices computed from its own. Its
// dims and its input's (size-1 dims aside) fall into blocks of equal
// products; the block's own indices combine row-major into one linear
// index L (one Index over the iteration space where they are plain dims),
// and each input dim of the block reads the digit (L / inner) % size, inner
// the product of the block's input sizes after it (IndexDiv and IndexMod on
// indices; the last digit needs no quotient, the first no remainder). A
// block of one input dim (a split) reads L itself, an affine index. So a
// reshape that merges dims of a computed value folds into the kernel that
// reads it (eva02's rotary stack-and-flatten, a stepped slice's gradient
// interleaved by a cat), where before the value went through memory.
// Digits meet strides at the loads: where a load's strides along a block's
// digits are in the ratio of their inner products (the dims torch could
// view as merged), load() folds them back into L times the last digit's
// stride (fold_digits), so merging a contiguous value stays a strided load
// that vectorizes; otherwise the load reads at the computed indices.
std::optional<ValueLowering::IndexMap> ValueLowering::reshape_input_map(const graph::TensorMeta& in,
                                                                        const graph::TensorMeta& out,
                                                                        const IndexMap& map) {
  Kernel& k = out_->kernel;
  auto non_unit_dims = [](const std::vector<int64_t>& sizes) {
    std::vector<size_t> dims;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] != 1) dims.push_back(d);
    }
    return dims;
  };
  const std::vector<size_t> in_dims = non_unit_dims(in.sizes);
  const std::vector<size_t> out_dims = non_unit_dims(out.sizes);
  for (size_t d : in_dims) {
    if (in.sizes[d] == 0) return std::nullopt;
  }
  IndexMap in_map(in.sizes.size());
  size_t i = 0, o = 0;
  while (i < in_dims.size()) {
    const size_t in_first = i, out_first = o;
    int64_t in_product = in.sizes[in_dims[i++]], out_product = 1;
    // Sizes here are at least 2: the products grow until they meet.
    while (in_product != out_product) {
      if (out_product < in_product) {
        if (o == out_dims.size()) return std::nullopt;
        out_product *= out.sizes[out_dims[o++]];
      } else {
        if (i == in_dims.size()) return std::nullopt;
        in_product *= in.sizes[in_dims[i++]];
      }
    }
    // L: row-major over the block's own dims, the last one moving by 1.
    std::vector<int64_t> strides(k.sizes.size(), 0);
    IndexTerm linear;
    int computed = -1;
    int64_t step = 1;
    for (size_t q = o; q-- > out_first;) {
      const IndexTerm& t = map[out_dims[q]];
      linear.offset += t.offset * step;
      if (t.dim >= 0) strides[t.dim] += step;
      if (t.expr >= 0) {
        const int scaled = step == 1 ? t.expr
                                     : k.binary(BinaryOp::Mul, t.expr, k.constant(DType::Int64, static_cast<double>(step)));
        computed = computed < 0 ? scaled : k.binary(BinaryOp::Add, computed, scaled);
      }
      step *= out.sizes[out_dims[q]];
    }
    const bool any_dim = std::any_of(strides.begin(), strides.end(), [](int64_t s) { return s != 0; });
    linear.expr = any_dim ? index_expr(strides) : -1;
    if (computed >= 0) linear.expr = linear.expr < 0 ? computed : k.binary(BinaryOp::Add, linear.expr, computed);
    if (i - in_first == 1) {
      in_map[in_dims[in_first]] = linear;
      continue;
    }
    const bool fixed = linear.expr < 0;  // a point reads one place: digits are offsets
    const int at = fixed ? -1 : index_of(linear);
    int64_t inner = 1;
    for (size_t q = i; q-- > in_first;) {
      const int64_t size = in.sizes[in_dims[q]];
      if (fixed) {
        in_map[in_dims[q]].offset = q == in_first ? linear.offset / inner : linear.offset / inner % size;
      } else {
        int digit = inner == 1 ? at : k.binary(BinaryOp::IndexDiv, at, k.size_constant(inner));
        if (q != in_first) digit = k.binary(BinaryOp::IndexMod, digit, k.size_constant(size));
        in_map[in_dims[q]] = IndexTerm{-1, 0, digit};
      }
      inner *= size;
    }
  }
  if (o != out_dims.size()) return std::nullopt;
  return in_map;
}

// One digit of a linear index (Note [Reshapes in kernels]): expression
// (linear / inner) % size, size 0 for the first digit (no remainder).
struct ValueLowering::Digit {
  int linear;
  int64_t inner, size;
};

std::optional<ValueLowering::Digit> ValueLowering::digit_of(int expr) const {
  const std::vector<Expr>& exprs = out_->kernel.exprs;
  auto divided = [&](const Expr& e, BinaryOp op) {
    return e.kind == ExprKind::Binary && e.op == static_cast<int8_t>(op) &&
           exprs[e.operands[1]].kind == ExprKind::Constant;
  };
  const Expr& e = exprs[expr];
  if (divided(e, BinaryOp::IndexDiv)) return Digit{e.operands[0], exprs[e.operands[1]].integer, 0};
  if (!divided(e, BinaryOp::IndexMod)) return std::nullopt;
  const int64_t size = exprs[e.operands[1]].integer;
  const Expr& quotient = exprs[e.operands[0]];
  if (divided(quotient, BinaryOp::IndexDiv)) return Digit{quotient.operands[0], exprs[quotient.operands[1]].integer, size};
  return Digit{e.operands[0], 1, size};
}

void ValueLowering::fold_digits(std::vector<std::pair<int, int64_t>>* terms) const {
  struct Found {
    Digit digit;
    size_t at;
  };
  std::vector<Found> found;
  for (size_t t = 0; t < terms->size(); ++t) {
    if (std::optional<Digit> d = digit_of((*terms)[t].first)) found.push_back({*d, t});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.digit.linear, a.digit.inner) < std::tie(b.digit.linear, b.digit.inner);
  });
  std::vector<bool> drop(terms->size(), false);
  for (size_t first = 0; first < found.size();) {
    size_t last = first;
    while (last + 1 < found.size() && found[last + 1].digit.linear == found[first].digit.linear) ++last;
    const int64_t stride = (*terms)[found[first].at].second;
    bool whole = found[first].digit.inner == 1 && found[last].digit.size == 0;
    for (size_t r = first; whole && r <= last; ++r) {
      const Digit& d = found[r].digit;
      whole = (*terms)[found[r].at].second == stride * d.inner &&
              (r == last || (d.size > 0 && found[r + 1].digit.inner == d.inner * d.size));
    }
    if (whole) {
      (*terms)[found[first].at].first = found[first].digit.linear;
      for (size_t r = first + 1; r <= last; ++r) drop[found[r].at] = true;
    }
    first = last + 1;
  }
  size_t kept = 0;
  for (size_t t = 0; t < terms->size(); ++t) {
    if (!drop[t]) (*terms)[kept++] = (*terms)[t];
  }
  terms->resize(kept);
}

// Note [Cat in kernels]: the pieces as a chain of selects on the index
// along the cat dim, each read at its own index clamped into its range.
int ValueLowering::emit_cat(const PrimNode& node, const IndexMap& map) {
  const int64_t d = node.attrs.dim;
  const graph::TensorMeta& out = graph_.value(node.outputs[0]).meta;
  const DType dtype = compute_dtype(out.dtype);
  Kernel& k = out_->kernel;
  struct Piece {
    int value;
    int64_t start, size;
  };
  std::vector<Piece> pieces;
  int64_t start = 0;
  for (const prims::PrimArg& arg : node.args) {
    const int64_t size = graph_.value(arg.value).meta.sizes.at(d);
    if (size > 0) pieces.push_back({arg.value, start, size});
    start += size;
  }
  if (pieces.empty()) throw LoweringError("cat: every piece is empty");
  const IndexTerm& term = map[d];
  // A point of the space reads one fixed index along the dim: one piece.
  if (term.dim < 0 && term.expr < 0) {
    for (const Piece& p : pieces) {
      if (term.offset < p.start + p.size) {
        IndexMap piece_map = map;
        piece_map[d].offset -= p.start;
        return cast_to(emit(p.value, piece_map), dtype);
      }
    }
    throw LoweringError("cat: read past its end");
  }
  const int at = index_of(term);
  // The pieces' bounds are sizes (Expr::size_value): a cat whose pieces
  // follow a dynamic length compiles one CUDA kernel for every length.
  auto constant = [&](int64_t v) { return k.size_constant(v); };
  // Every piece a unit-step slice of one value along the dim (torch.roll):
  // the select picks the index into that value, and one load reads it.
  int source = -1;
  std::vector<int64_t> source_starts;
  for (const Piece& p : pieces) {
    const int n = graph_.value(p.value).node;
    const PrimNode* slice = in_group(p.value) ? &graph_.node(n) : nullptr;
    if (slice == nullptr || slice->prim != Prim::Slice || slice->attrs.dim != d || slice->attrs.step != 1 ||
        (source >= 0 && slice->args[0].value != source)) {
      source = -1;
      break;
    }
    source = slice->args[0].value;
    const int64_t size = graph_.value(source).meta.sizes[d];
    int64_t slice_start = slice->attrs.start.value_or(0);
    if (slice_start < 0) slice_start += size;
    source_starts.push_back(std::clamp<int64_t>(slice_start, 0, size));
  }
  if (source >= 0) {
    int index = -1;
    for (size_t i = pieces.size(); i-- > 0;) {
      const int shift = source_starts[i] - pieces[i].start == 0
                            ? at
                            : k.binary(BinaryOp::Add, at, constant(source_starts[i] - pieces[i].start));
      index = index < 0 ? shift
                        : k.select(k.compare(CompareOp::Lt, at, constant(pieces[i].start + pieces[i].size)), shift,
                                   index);
    }
    IndexMap source_map = map;
    source_map[d] = IndexTerm{-1, 0, index};
    return cast_to(emit(source, source_map), dtype);
  }
  int result = -1;
  for (size_t i = pieces.size(); i-- > 0;) {
    const Piece& p = pieces[i];
    IndexMap piece_map = map;
    if (p.size == 1) {
      piece_map[d] = IndexTerm{};
    } else {
      int local = p.start == 0 ? at : k.binary(BinaryOp::Sub, at, constant(p.start));
      if (i > 0) local = k.binary(BinaryOp::Maximum, local, constant(0));
      if (i + 1 < pieces.size()) local = k.binary(BinaryOp::Minimum, local, constant(p.size - 1));
      piece_map[d] = IndexTerm{-1, 0, local};
    }
    const int value = cast_to(emit(p.value, piece_map), dtype);
    result = result < 0 ? value
                        : k.select(k.compare(CompareOp::Lt, at, constant(p.start + p.size)), value, result);
  }
  return result;
}

}  // namespace kiln::inductor
