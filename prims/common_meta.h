// Facts every meta rule shares: wrapping dims, the device of a result, and
// whether a result requires grad.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::prims {

using graph::TensorMeta;

// Wraps a possibly negative dim into [0, ndim), as torch's maybe_wrap_dim. A
// 0-dim tensor accepts dims -1 and 0 (both meaning the tensor itself) when
// `scalar_ok`. Throws PrimError naming the accepted range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim, bool scalar_ok = true);

// Wraps every dim and rejects repeats ("dim 0 appears multiple times").
std::vector<int64_t> wrap_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim);

// The device elementwise ops run on: the first tensor's that is not a 0-dim
// CPU tensor (those combine with tensors on any device, as torch allows).
// Throws PrimError when the others disagree. Precondition: tensors non-empty.
TensorMeta device_of_elementwise(const char* op, const std::vector<const TensorMeta*>& tensors);

// Checks that all tensors are on one device and copies it into `out`.
void same_device(const char* op, const std::vector<const TensorMeta*>& tensors, TensorMeta* out);

// A result requires grad when an input does and its dtype can carry
// gradients (floating or complex). Grad mode is the caller's business.
bool result_requires_grad(const std::vector<const TensorMeta*>& inputs, graph::DType result);

// The number of elements of a shape.
int64_t numel(const std::vector<int64_t>& sizes);

// Bytes of one value (numel * element size; views count in full).
int64_t value_bytes(const TensorMeta& meta);

}  // namespace kiln::prims
