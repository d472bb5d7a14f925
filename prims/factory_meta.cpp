#include "prims/factory_meta.h"

#include <string>

#include "prims/common_meta.h"
#include "prims/prim.h"
#include "prims/prim_error.h"

namespace kiln::prims {
namespace {

graph::TensorMeta fresh(const char* op, const std::vector<int64_t>& sizes, DType dtype,
                        const Placement& where) {
  for (int64_t s : sizes) {
    if (s < 0) fail(op, "negative dimension " + std::to_string(s) + " in " + format_shape(sizes));
  }
  if (dtype == DType::Other) fail(op, "kiln does not model this dtype");
  graph::TensorMeta out;
  out.sizes = sizes;
  out.strides = graph::contiguous_strides(sizes);
  out.dtype = dtype;
  out.device_type = where.device_type;
  out.device_index = where.device_index;
  out.requires_grad = where.requires_grad;
  if (out.requires_grad && !is_floating(dtype) && !is_complex(dtype)) {
    fail(op, "only floating point and complex tensors can require gradients");
  }
  return out;
}

}  // namespace

graph::TensorMeta full_meta(const std::vector<int64_t>& sizes, ScalarKind value,
                            std::optional<DType> dtype, Placement where, DType default_float) {
  return fresh("full", sizes, dtype ? *dtype : scalar_dtype(value, default_float), where);
}

graph::TensorMeta iota_meta(int64_t length, DType dtype, Placement where) {
  if (!is_integer(dtype) && !is_floating(dtype)) {
    fail("iota", std::string("expected an integer or floating dtype, got ") + graph::dtype_name(dtype));
  }
  return fresh("iota", {length}, dtype, where);
}

graph::TensorMeta random_meta(Prim prim, const std::vector<int64_t>& sizes, DType dtype,
                              Placement where) {
  const char* op = prim_name(prim);
  if (prim != Prim::Uniform && prim != Prim::Normal) fail(op, "not a random factory");
  if (!is_floating(dtype) && !is_complex(dtype)) {
    fail(op, std::string("expected a floating or complex dtype, got ") + graph::dtype_name(dtype));
  }
  return fresh(op, sizes, dtype, where);
}

graph::TensorMeta bernoulli_meta(const graph::TensorMeta& p) {
  if (!is_floating(p.dtype)) {
    fail("bernoulli", std::string("expected floating probabilities, got ") + graph::dtype_name(p.dtype));
  }
  graph::TensorMeta out = p;
  out.strides = graph::contiguous_strides(p.sizes);
  // torch records bernoulli in autograd (with a zero derivative).
  out.requires_grad = p.requires_grad;
  return out;
}

std::vector<graph::TensorMeta> extern_meta(const std::vector<graph::TensorMeta>& given) {
  return given;
}

}  // namespace kiln::prims
