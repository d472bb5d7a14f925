#include "prims/pointwise_meta.h"

#include <string>

#include "prims/broadcast.h"
#include "prims/common_meta.h"
#include "prims/prim_error.h"

namespace kiln::prims {
namespace {

std::string dtype_text(DType d) { return graph::dtype_name(d); }

void check_arity(Prim prim, const std::vector<Operand>& operands) {
  const PrimInfo& info = prim_info(prim);
  const Family family = info.family;
  if (family != Family::Unary && family != Family::Binary && family != Family::Ternary) {
    fail(info.name, "not an elementwise prim");
  }
  if (static_cast<int>(operands.size()) != info.arity) {
    fail(info.name, "expected " + std::to_string(info.arity) + " operands, got " +
                        std::to_string(operands.size()));
  }
  bool any_tensor = false;
  for (const Operand& operand : operands) any_tensor = any_tensor || operand.is_tensor();
  if (!any_tensor) fail(info.name, "expected at least one tensor operand");
  if (family == Family::Unary && !operands[0].is_tensor()) fail(info.name, "expected a tensor");
}

DType operand_dtype(const Operand& operand, DType default_float) {
  return operand.is_tensor() ? operand.tensor->dtype : scalar_dtype(operand.scalar, default_float);
}

// where(cond, a, b): cond must be bool and takes no part in promotion.
ElementwiseDTypes where_dtypes(const std::vector<Operand>& operands, DType default_float) {
  const DType cond = operand_dtype(operands[0], default_float);
  if (!is_bool(cond)) {
    fail("where", "expected condition to be a boolean tensor, but got a tensor with dtype " +
                      dtype_text(cond));
  }
  return elementwise_dtypes("where", {operands[1], operands[2]}, PromotionKind::Default,
                            default_float);
}

}  // namespace

ElementwiseDTypes pointwise_dtypes(Prim prim, const std::vector<Operand>& operands,
                                   DType default_float) {
  check_arity(prim, operands);
  const PrimInfo& info = prim_info(prim);
  if (prim == Prim::Where) return where_dtypes(operands, default_float);
  if (info.flags & kNoBoolOperand) {
    for (const Operand& operand : operands) {
      if (is_bool(operand_dtype(operand, default_float))) {
        fail(info.name, "not supported for bool operands (use logical_xor or logical_not)");
      }
    }
  }
  const ElementwiseDTypes dtypes =
      elementwise_dtypes(info.name, operands, info.promotion, default_float);
  const DType common = dtypes.common;
  if ((info.flags & kNoBool) && is_bool(common)) fail(info.name, "not supported for bool");
  if ((info.flags & kNoComplex) && is_complex(common)) {
    fail(info.name, "not supported for complex dtype " + dtype_text(common));
  }
  if ((info.flags & kIntegralOnly) && !is_bool(common) && !is_integer(common)) {
    fail(info.name, "only supports bool and integer dtypes, got " + dtype_text(common));
  }
  return dtypes;
}

graph::TensorMeta pointwise_meta(Prim prim, const std::vector<Operand>& operands,
                                 DType default_float) {
  const ElementwiseDTypes dtypes = pointwise_dtypes(prim, operands, default_float);
  const char* op = prim_name(prim);
  std::vector<const graph::TensorMeta*> tensors;
  std::vector<std::vector<int64_t>> shapes;
  // torch wraps Python scalars as 0-dim tensors, which take part in the
  // layout decision (they stop TensorIterator's same-shape fast path).
  static const graph::TensorMeta kWrappedScalar;
  std::vector<const graph::TensorMeta*> layout_inputs;
  for (const Operand& operand : operands) {
    if (!operand.is_tensor()) {
      layout_inputs.push_back(&kWrappedScalar);
      continue;
    }
    tensors.push_back(&*operand.tensor);
    layout_inputs.push_back(&*operand.tensor);
    shapes.push_back(operand.tensor->sizes);
  }
  graph::TensorMeta out = device_of_elementwise(op, tensors);
  out.sizes = broadcast_shapes(op, shapes);
  out.strides = elementwise_output_strides(out.sizes, layout_inputs);
  out.dtype = dtypes.result;
  out.requires_grad = result_requires_grad(tensors, out.dtype);
  return out;
}

graph::TensorMeta convert_element_type_meta(const graph::TensorMeta& a, DType dtype) {
  if (dtype == DType::Other) fail("convert_element_type", "kiln does not model this dtype");
  graph::TensorMeta out = clone_meta(a);
  out.dtype = dtype;
  out.requires_grad = result_requires_grad({&a}, dtype);
  return out;
}

graph::TensorMeta clone_meta(const graph::TensorMeta& a, MemoryFormat format) {
  graph::TensorMeta out = a;
  if (format == MemoryFormat::Preserve) {
    out.strides = preserved_strides(a.sizes, a.strides);
  } else {
    const size_t rank = format == MemoryFormat::ChannelsLast ? 4
                        : format == MemoryFormat::ChannelsLast3d ? 5
                                                                  : a.sizes.size();
    if (a.sizes.size() != rank) {
      fail("clone", "memory format needs a rank " + std::to_string(rank) + " tensor, got rank " +
                        std::to_string(a.sizes.size()));
    }
    out.strides = strides_for(a.sizes, format);
  }
  return out;
}

}  // namespace kiln::prims
