#include "prims/reduction_meta.h"

#include <string>

#include "prims/common_meta.h"
#include "prims/prim_error.h"
#include "prims/type_promotion.h"

namespace kiln::prims {
namespace {

// The reduced shape and which dims were reduced (every dim when `dims` is empty).
graph::TensorMeta reduced(const char* op, const graph::TensorMeta& a,
                          const std::vector<int64_t>& dims, bool keepdim,
                          std::vector<bool>* mask) {
  const int64_t ndim = static_cast<int64_t>(a.sizes.size());
  mask->assign(ndim, dims.empty());
  for (int64_t d : wrap_dims(op, dims, ndim)) {
    if (d < ndim) (*mask)[d] = true;  // a 0-dim tensor's dim 0 is itself
  }
  graph::TensorMeta out = a;
  out.sizes.clear();
  for (int64_t d = 0; d < ndim; ++d) {
    if (!(*mask)[d]) out.sizes.push_back(a.sizes[d]);
    else if (keepdim) out.sizes.push_back(1);
  }
  out.strides = graph::contiguous_strides(out.sizes);
  return out;
}

void check_dtype(Prim prim, DType dtype) {
  const char* op = prim_name(prim);
  if (has_flag(prim, kNoBool) && is_bool(dtype)) fail(op, "does not support bool input");
  if (has_flag(prim, kNoComplex) && is_complex(dtype)) {
    fail(op, std::string("not supported for complex dtype ") + graph::dtype_name(dtype));
  }
  if (dtype == DType::Other) fail(op, "kiln does not model this dtype");
}

}  // namespace

graph::TensorMeta reduction_meta(Prim prim, const graph::TensorMeta& a,
                                 const std::vector<int64_t>& dims, bool keepdim,
                                 std::optional<DType> dtype) {
  const char* op = prim_name(prim);
  if (prim_info(prim).family != Family::Reduction || prim == Prim::VarMean) {
    fail(op, "not a single-output reduction");
  }
  check_dtype(prim, a.dtype);
  const bool is_arg = prim == Prim::Argmax || prim == Prim::Argmin;
  if (is_arg && dims.size() > 1) fail(op, "expected at most one dim");
  if (dtype && prim != Prim::Sum && prim != Prim::Prod) fail(op, "takes no dtype argument");
  std::vector<bool> mask;
  graph::TensorMeta out = reduced(op, a, dims, keepdim, &mask);
  // max and min have no identity: reducing nothing is an error.
  if (prim == Prim::Amax || prim == Prim::Amin || is_arg) {
    if (dims.empty() && numel(a.sizes) == 0) {
      fail(op, "expected reduction dim to be specified for input.numel() == 0");
    }
    for (size_t d = 0; d < mask.size(); ++d) {
      if (mask[d] && a.sizes[d] == 0) {
        fail(op, "expected reduction dim " + std::to_string(d) + " to have non-zero size");
      }
    }
  }
  if (prim == Prim::Sum || prim == Prim::Prod) {
    out.dtype = dtype ? *dtype : (is_bool(a.dtype) || is_integer(a.dtype) ? DType::Int64 : a.dtype);
  } else if (is_arg) {
    out.dtype = DType::Int64;
  }
  out.requires_grad = result_requires_grad({&a}, out.dtype);
  return out;
}

VarMeanMeta var_mean_meta(const graph::TensorMeta& a, const std::vector<int64_t>& dims,
                          bool keepdim) {
  if (!is_floating(a.dtype) && !is_complex(a.dtype)) {
    fail("var_mean", std::string("only supports floating point and complex dtypes, got ") +
                         graph::dtype_name(a.dtype));
  }
  std::vector<bool> mask;
  VarMeanMeta out;
  out.mean = reduced("var_mean", a, dims, keepdim, &mask);
  out.var = out.mean;
  out.var.dtype = to_real(a.dtype);
  return out;
}

}  // namespace kiln::prims
