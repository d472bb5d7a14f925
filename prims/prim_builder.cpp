#include "prims/prim_builder.h"

#include <algorithm>

#include "prims/cat_meta.h"
#include "prims/common_meta.h"
#include "prims/index_meta.h"
#include "prims/matmul_meta.h"
#include "prims/pointwise_meta.h"
#include "prims/prim_error.h"
#include "prims/reduction_meta.h"
#include "prims/view_meta.h"

namespace kiln::prims {

int PrimBuilder::pointwise(Prim prim, std::vector<PrimArg> args) {
  const Family family = prim_info(prim).family;
  if (family != Family::Unary && family != Family::Binary && family != Family::Ternary) {
    fail(prim_name(prim), "is not an elementwise prim");
  }
  std::vector<Operand> operands;
  for (const PrimArg& arg : args) {
    operands.push_back(arg.is_value() ? Operand::of(meta(arg.value)) : Operand::of(arg.scalar.kind));
  }
  graph::TensorMeta out = pointwise_meta(prim, operands, default_float_);
  return graph_.add_node1(prim, std::move(args), {}, out);
}

int PrimBuilder::convert(int a, DType dtype) {
  PrimAttrs attrs;
  attrs.dtype = dtype;
  return graph_.add_node1(Prim::ConvertElementType, {PrimArg::of_value(a)}, std::move(attrs),
                          convert_element_type_meta(meta(a), dtype));
}

int PrimBuilder::clone(int a, MemoryFormat format) {
  return graph_.add_node1(Prim::Clone, {PrimArg::of_value(a)}, {}, clone_meta(meta(a), format));
}

int PrimBuilder::reduce(Prim prim, int a, std::vector<int64_t> dims, bool keepdim,
                        std::optional<DType> dtype) {
  if (prim_info(prim).family != Family::Reduction || prim == Prim::VarMean) {
    fail(prim_name(prim), "is not a single-output reduction");
  }
  graph::TensorMeta out = reduction_meta(prim, meta(a), dims, keepdim, dtype);
  PrimAttrs attrs;
  attrs.dims = wrap_dims(prim_name(prim), dims, static_cast<int64_t>(meta(a).sizes.size()));
  attrs.keepdim = keepdim;
  attrs.dtype = dtype;
  return graph_.add_node1(prim, {PrimArg::of_value(a)}, std::move(attrs), out);
}

std::pair<int, int> PrimBuilder::var_mean(int a, std::vector<int64_t> dims, double correction,
                                          bool keepdim) {
  VarMeanMeta out = var_mean_meta(meta(a), dims, keepdim);
  PrimAttrs attrs;
  attrs.dims = wrap_dims("var_mean", dims, static_cast<int64_t>(meta(a).sizes.size()));
  attrs.keepdim = keepdim;
  attrs.correction = correction;
  std::vector<int> ids = graph_.add_node(Prim::VarMean, {PrimArg::of_value(a)}, std::move(attrs),
                                         {out.var, out.mean});
  return {ids[0], ids[1]};
}

int PrimBuilder::view(int a, std::vector<int64_t> sizes) {
  ViewMeta out = view_meta(meta(a), sizes);
  PrimAttrs attrs;
  attrs.sizes = out.meta.sizes;  // -1 resolved
  return graph_.add_node1(Prim::View, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::reshape(int a, std::vector<int64_t> sizes) {
  ReshapeMeta out = reshape_meta(meta(a), sizes);
  PrimAttrs attrs;
  attrs.sizes = out.meta.sizes;
  return graph_.add_node1(Prim::Reshape, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::view_like(const PrimNode& node, int a) {
  // Copied first: the view's node may move as nodes are added.
  const PrimAttrs attrs = node.attrs;
  switch (node.prim) {
    case Prim::View: return view(a, attrs.sizes);
    case Prim::Reshape: return reshape(a, attrs.sizes);
    case Prim::Expand: return expand(a, attrs.sizes);
    case Prim::Permute: return permute(a, attrs.dims);
    case Prim::Slice: return slice(a, attrs.dim, attrs.start, attrs.end, attrs.step);
    case Prim::Squeeze: return squeeze(a, attrs.dims);
    case Prim::Unsqueeze: return unsqueeze(a, attrs.dim);
    default: throw PrimError(std::string(prim_name(node.prim)) + " made again as a view");
  }
}

int PrimBuilder::expand(int a, std::vector<int64_t> sizes) {
  ViewMeta out = expand_meta(meta(a), sizes);
  PrimAttrs attrs;
  attrs.sizes = out.meta.sizes;
  return graph_.add_node1(Prim::Expand, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::permute(int a, std::vector<int64_t> dims) {
  ViewMeta out = permute_meta(meta(a), dims);
  PrimAttrs attrs;
  attrs.dims = wrap_dims("permute", dims, static_cast<int64_t>(meta(a).sizes.size()));
  return graph_.add_node1(Prim::Permute, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::slice(int a, int64_t dim, std::optional<int64_t> start,
                       std::optional<int64_t> end, int64_t step) {
  ViewMeta out = slice_meta(meta(a), dim, start, end, step);
  PrimAttrs attrs;
  attrs.dim = wrap_dim("slice", dim, static_cast<int64_t>(meta(a).sizes.size()), false);
  attrs.start = start;
  attrs.end = end;
  attrs.step = step;
  return graph_.add_node1(Prim::Slice, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::squeeze(int a, std::vector<int64_t> dims) {
  ViewMeta out = squeeze_meta(meta(a), dims);
  PrimAttrs attrs;
  attrs.dims = wrap_dims("squeeze", dims, static_cast<int64_t>(meta(a).sizes.size()));
  return graph_.add_node1(Prim::Squeeze, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::unsqueeze(int a, int64_t dim) {
  ViewMeta out = unsqueeze_meta(meta(a), dim);
  PrimAttrs attrs;
  attrs.dim = wrap_dim("unsqueeze", dim, static_cast<int64_t>(meta(a).sizes.size()) + 1);
  return graph_.add_node1(Prim::Unsqueeze, {PrimArg::of_value(a)}, std::move(attrs), out.meta);
}

int PrimBuilder::as_strided(int a, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int64_t offset) {
  graph::TensorMeta out = as_strided_meta(meta(a), sizes, strides, offset);
  PrimAttrs attrs;
  attrs.sizes = std::move(sizes);
  attrs.strides = std::move(strides);
  attrs.offset = offset;
  return graph_.add_node1(Prim::AsStrided, {PrimArg::of_value(a)}, std::move(attrs), out);
}

int PrimBuilder::cat(const std::vector<int>& tensors, int64_t dim) {
  std::vector<graph::TensorMeta> metas;
  std::vector<PrimArg> args;
  for (int t : tensors) {
    metas.push_back(meta(t));
    args.push_back(PrimArg::of_value(t));
  }
  graph::TensorMeta out = cat_meta(metas, dim);
  PrimAttrs attrs;
  attrs.dim = wrap_dim("cat", dim, static_cast<int64_t>(out.sizes.size()), false);
  // Note [Cat of one non-empty tensor]: a key/value cache's first step
  // appends to an empty past (torch.cat([past, new], dim=-2), 24 calls a
  // GPT-2 forward, each through torch). With every other input empty along
  // the dim and needing no gradient, the result is a copy of that input: a
  // clone, which kiln's kernels take. The empty inputs still take part in
  // type promotion: transformers' DynamicLayer makes its empty past in the
  // keys' dtype (float32 after a float32 rotary embedding under autocast),
  // and torch's cat of it with bfloat16 values is float32; the copy then
  // converts (it was an extern and its gradient a Python rerun, 1.8 ms of a
  // 6-layer Llama's backward host time on an H200).
  int only = -1;
  bool single = true;
  for (int t : tensors) {
    const graph::TensorMeta& m = meta(t);
    const bool empty = std::find(m.sizes.begin(), m.sizes.end(), 0) != m.sizes.end();
    if (empty && !m.requires_grad) continue;
    single = single && only < 0;
    only = t;
  }
  if (single && only >= 0 && meta(only).sizes == out.sizes) {
    const MemoryFormat format = suggest_memory_format(out.sizes, out.strides);
    if (strides_for(out.sizes, format) == out.strides) {
      const int copy = clone(only, format);
      return meta(copy).dtype == out.dtype ? copy : convert(copy, out.dtype);
    }
  }
  return graph_.add_node1(Prim::Cat, std::move(args), std::move(attrs), out);
}

int PrimBuilder::matmul(int a, int b) {
  graph::TensorMeta out = matmul_meta(meta(a), meta(b));
  return graph_.add_node1(Prim::Matmul, {PrimArg::of_value(a), PrimArg::of_value(b)}, {}, out);
}

int PrimBuilder::gather(int a, int64_t dim, int index) {
  graph::TensorMeta out = gather_meta(meta(a), dim, meta(index));
  PrimAttrs attrs;
  attrs.dim = wrap_dim("gather", dim, static_cast<int64_t>(meta(a).sizes.size()));
  return graph_.add_node1(Prim::Gather, {PrimArg::of_value(a), PrimArg::of_value(index)},
                          std::move(attrs), out);
}

int PrimBuilder::scatter(int a, int64_t dim, int index, PrimArg src, bool add) {
  if (add && !src.is_value()) fail("scatter", "scatter_add takes a tensor src, not a scalar");
  graph::TensorMeta out =
      scatter_meta(meta(a), dim, meta(index), src.is_value() ? &meta(src.value) : nullptr);
  PrimAttrs attrs;
  attrs.dim = wrap_dim("scatter", dim, static_cast<int64_t>(meta(a).sizes.size()));
  attrs.accumulate = add;
  return graph_.add_node1(Prim::Scatter, {PrimArg::of_value(a), PrimArg::of_value(index), src},
                          std::move(attrs), out);
}

// Note [Index ranges]
// index_select by an arange (a position embedding: pos(torch.arange(t)))
// reads rows start, start + step, ... of a: a strided slice of it. A gather
// there cost a kernel and its host call forward, and backward an index
// tensor, zeros and a scatter_add; as a contiguous clone of the slice (the
// copy index_select makes) it is a read any kernel can fuse, and a range
// covering the whole dim is a clone of a, whose gradient is g itself. The
// index is recognized through 1-D reshapes and views of an iota in range;
// other indices are gathered.
std::optional<std::pair<int64_t, int64_t>> PrimBuilder::index_range(int index, int64_t extent) const {
  int value = index;
  while (true) {
    const int node = graph_.value(value).node;
    if (node < 0) return std::nullopt;
    const PrimNode& producer = graph_.node(node);
    if (producer.prim == Prim::Iota) break;
    if ((producer.prim != Prim::Reshape && producer.prim != Prim::View) || !producer.args[0].is_value()) {
      return std::nullopt;
    }
    const std::vector<int64_t>& from = graph_.value(producer.args[0].value).meta.sizes;
    if (from.size() != 1 || from != graph_.value(value).meta.sizes) return std::nullopt;
    value = producer.args[0].value;
  }
  const PrimAttrs& attrs = graph_.node(graph_.value(value).node).attrs;
  const int64_t length = attrs.sizes.empty() ? 0 : attrs.sizes[0];
  const int64_t start = attrs.start.value_or(0);
  const int64_t step = attrs.step;
  if (length < 1 || start < 0 || step < 1 || start + (length - 1) * step >= extent) return std::nullopt;
  return std::make_pair(start, step);
}

int PrimBuilder::index_select(int a, int64_t dim, int index) {
  graph::TensorMeta out = index_select_meta(meta(a), dim, meta(index));
  PrimAttrs attrs;
  attrs.dim = wrap_dim("index_select", dim, static_cast<int64_t>(meta(a).sizes.size()));
  const graph::TensorMeta in = meta(a);
  if (!in.sizes.empty() && meta(index).sizes.size() == 1) {
    // Note [Index ranges]
    if (const auto range = index_range(index, in.sizes[attrs.dim])) {
      const auto [start, step] = *range;
      const int64_t length = meta(index).sizes[0];
      const bool whole = start == 0 && step == 1 && length == in.sizes[attrs.dim];
      const int rows = whole ? a : slice(a, attrs.dim, start, start + (length - 1) * step + 1, step);
      return clone(rows, MemoryFormat::Contiguous);
    }
  }
  return graph_.add_node1(Prim::IndexSelect, {PrimArg::of_value(a), PrimArg::of_value(index)},
                          std::move(attrs), out);
}

int PrimBuilder::index_put(int a, const std::vector<std::optional<int>>& indices, int values,
                           bool accumulate) {
  std::vector<std::optional<graph::TensorMeta>> index_metas;
  std::vector<PrimArg> args = {PrimArg::of_value(a), PrimArg::of_value(values)};
  PrimAttrs attrs;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i]) {
      index_metas.emplace_back(meta(*indices[i]));
      args.push_back(PrimArg::of_value(*indices[i]));
      attrs.dims.push_back(static_cast<int64_t>(i));
    } else {
      index_metas.emplace_back(std::nullopt);
    }
  }
  if (attrs.dims.empty()) fail("index_put", "needs at least one index tensor");
  graph::TensorMeta out = index_put_meta(meta(a), index_metas, meta(values));
  attrs.accumulate = accumulate;
  return graph_.add_node1(Prim::IndexPut, std::move(args), std::move(attrs), out);
}

namespace {

PrimAttrs placed(std::vector<int64_t> sizes, std::optional<DType> dtype, const Placement& where) {
  PrimAttrs attrs;
  attrs.sizes = std::move(sizes);
  attrs.dtype = dtype;
  attrs.device_type = where.device_type;
  attrs.device_index = where.device_index;
  return attrs;
}

}  // namespace

int PrimBuilder::full(std::vector<int64_t> sizes, Scalar value, std::optional<DType> dtype,
                      Placement where) {
  graph::TensorMeta out = full_meta(sizes, value.kind, dtype, where, default_float_);
  PrimAttrs attrs = placed(std::move(sizes), out.dtype, where);
  attrs.value = value;
  return graph_.add_node1(Prim::Full, {}, std::move(attrs), out);
}

int PrimBuilder::iota(int64_t length, int64_t start, int64_t step, DType dtype, Placement where) {
  graph::TensorMeta out = iota_meta(length, dtype, where);
  PrimAttrs attrs = placed({length}, dtype, where);
  attrs.start = start;
  attrs.step = step;
  return graph_.add_node1(Prim::Iota, {}, std::move(attrs), out);
}

int PrimBuilder::uniform(std::vector<int64_t> sizes, double low, double high, DType dtype,
                         Placement where) {
  graph::TensorMeta out = random_meta(Prim::Uniform, sizes, dtype, where);
  PrimAttrs attrs = placed(std::move(sizes), dtype, where);
  attrs.value = Scalar::of_float(low);
  attrs.value2 = Scalar::of_float(high);
  return graph_.add_node1(Prim::Uniform, {}, std::move(attrs), out);
}

int PrimBuilder::normal(std::vector<int64_t> sizes, double mean, double std, DType dtype,
                        Placement where) {
  graph::TensorMeta out = random_meta(Prim::Normal, sizes, dtype, where);
  PrimAttrs attrs = placed(std::move(sizes), dtype, where);
  attrs.value = Scalar::of_float(mean);
  attrs.value2 = Scalar::of_float(std);
  return graph_.add_node1(Prim::Normal, {}, std::move(attrs), out);
}

int PrimBuilder::bernoulli(int p) {
  return graph_.add_node1(Prim::Bernoulli, {PrimArg::of_value(p)}, {}, bernoulli_meta(meta(p)));
}

namespace {

// Checks that every node ref in an extern argument names an existing value.
void check_extern_arg(const graph::Arg& arg, int value_count) {
  if (arg.kind == graph::Arg::Kind::Node && (arg.node < 0 || arg.node >= value_count)) {
    fail("extern", "argument %" + std::to_string(arg.node) + " is not a value of the graph");
  }
  for (const graph::Arg& item : arg.items) check_extern_arg(item, value_count);
}

}  // namespace

std::vector<int> PrimBuilder::extern_call(PyObject* target, std::string target_name,
                                          std::vector<graph::Arg> args,
                                          std::vector<std::pair<std::string, graph::Arg>> kwargs,
                                          const std::vector<graph::TensorMeta>& metas, bool pure,
                                          bool fresh) {
  const int value_count = static_cast<int>(graph_.values().size());
  for (const graph::Arg& arg : args) check_extern_arg(arg, value_count);
  for (const auto& kw : kwargs) check_extern_arg(kw.second, value_count);
  PrimAttrs attrs;
  Py_INCREF(target);
  attrs.target = target;
  attrs.target_name = std::move(target_name);
  attrs.extern_args = std::move(args);
  attrs.extern_kwargs = std::move(kwargs);
  attrs.extern_pure = pure;
  attrs.extern_fresh = fresh || pure;
  return graph_.add_node(Prim::Extern, {}, std::move(attrs), extern_meta(metas));
}

}  // namespace kiln::prims
