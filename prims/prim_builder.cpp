#include "prims/prim_builder.h"

#include "prims/common_meta.h"
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

}  // namespace kiln::prims
