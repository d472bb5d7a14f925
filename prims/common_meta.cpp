#include "prims/common_meta.h"

#include <string>

#include "prims/prim_error.h"
#include "prims/type_promotion.h"

namespace kiln::prims {
namespace {

bool same_device_as(const TensorMeta& a, const TensorMeta& b) {
  return a.device_type == b.device_type && a.device_index == b.device_index;
}

std::string device_text(const TensorMeta& t) {
  return graph::device_name(t.device_type, t.device_index);
}

}  // namespace

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim, bool scalar_ok) {
  int64_t range = ndim;
  if (ndim == 0) {
    if (!scalar_ok) fail(op, "dimension specified as " + std::to_string(dim) + " but tensor has no dimensions");
    range = 1;
  }
  if (dim < -range || dim >= range) {
    fail(op, "dimension out of range (expected to be in range of [" + std::to_string(-range) +
                 ", " + std::to_string(range - 1) + "], but got " + std::to_string(dim) + ")");
  }
  return dim < 0 ? dim + range : dim;
}

std::vector<int64_t> wrap_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  std::vector<int64_t> wrapped;
  wrapped.reserve(dims.size());
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(op, dim, ndim);
    for (int64_t seen : wrapped) {
      if (seen == d) fail(op, "dim " + std::to_string(d) + " appears multiple times in the list of dims");
    }
    wrapped.push_back(d);
  }
  return wrapped;
}

TensorMeta device_of_elementwise(const char* op, const std::vector<const TensorMeta*>& tensors) {
  const TensorMeta* chosen = nullptr;
  for (const TensorMeta* t : tensors) {
    const bool cpu_scalar = t->sizes.empty() && t->device_type == graph::DeviceType::CPU;
    if (!cpu_scalar) {
      chosen = t;
      break;
    }
  }
  TensorMeta out;
  const TensorMeta& base = chosen != nullptr ? *chosen : *tensors.front();
  out.device_type = base.device_type;
  out.device_index = base.device_index;
  for (const TensorMeta* t : tensors) {
    const bool cpu_scalar = t->sizes.empty() && t->device_type == graph::DeviceType::CPU;
    if (!cpu_scalar && !same_device_as(*t, base)) {
      fail(op, "expected all tensors on one device, got " + device_text(base) + " and " +
                   device_text(*t));
    }
  }
  return out;
}

void same_device(const char* op, const std::vector<const TensorMeta*>& tensors, TensorMeta* out) {
  const TensorMeta& base = *tensors.front();
  for (const TensorMeta* t : tensors) {
    if (!same_device_as(*t, base)) {
      fail(op, "expected all tensors on one device, got " + device_text(base) + " and " +
                   device_text(*t));
    }
  }
  out->device_type = base.device_type;
  out->device_index = base.device_index;
}

bool result_requires_grad(const std::vector<const TensorMeta*>& inputs, graph::DType result) {
  if (!is_floating(result) && !is_complex(result)) return false;
  for (const TensorMeta* t : inputs) {
    if (t->requires_grad) return true;
  }
  return false;
}

int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int64_t value_bytes(const TensorMeta& meta) {
  int64_t element = 4;
  switch (meta.dtype) {
    case graph::DType::Bool:
    case graph::DType::UInt8:
    case graph::DType::Int8: element = 1; break;
    case graph::DType::Int16:
    case graph::DType::Float16:
    case graph::DType::BFloat16: element = 2; break;
    case graph::DType::Int64:
    case graph::DType::Float64:
    case graph::DType::Complex64: element = 8; break;
    case graph::DType::Complex128: element = 16; break;
    default: element = 4; break;
  }
  return numel(meta.sizes) * element;
}

}  // namespace kiln::prims
