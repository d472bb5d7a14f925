// Meta rules of the prims that make tensors: full, iota, the random draws
// (uniform, normal, bernoulli; seeded from torch's generator when they run)
// and extern, whose metadata comes from outside.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/tensor_meta.h"
#include "prims/prim.h"
#include "prims/type_promotion.h"

namespace kiln::prims {

// Where a factory puts its result.
struct Placement {
  graph::DeviceType device_type = graph::DeviceType::CPU;
  int8_t device_index = -1;
  bool requires_grad = false;
};

// full(sizes, value): contiguous; the dtype is `dtype`, or the value's
// default (bool, int64, the default float, complex64).
graph::TensorMeta full_meta(const std::vector<int64_t>& sizes, ScalarKind value,
                            std::optional<DType> dtype = std::nullopt, Placement where = {},
                            DType default_float = DType::Float32);

// iota(length, start, step, dtype): a 1-dim tensor of `length` integers or floats.
graph::TensorMeta iota_meta(int64_t length, DType dtype, Placement where = {});

// uniform(sizes, dtype) and normal(sizes, dtype): fresh random tensors of a
// floating or complex dtype (`prim` says which, for errors).
graph::TensorMeta random_meta(Prim prim, const std::vector<int64_t>& sizes, DType dtype,
                              Placement where = {});

// bernoulli(p): draws 0/1 with probabilities p; p's sizes and dtype, contiguous.
graph::TensorMeta bernoulli_meta(const graph::TensorMeta& p);

// extern: an op kiln keeps as a torch call; its outputs' metadata is given
// (by torch's meta kernels when traced) and passed through unchanged.
std::vector<graph::TensorMeta> extern_meta(const std::vector<graph::TensorMeta>& given);

}  // namespace kiln::prims
