// Tensor metadata the C++ tests build over and over: contiguous tensors of
// one dtype and these sizes.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::test {

// Contiguous metadata of `dtype` and these sizes, on the CPU.
inline graph::TensorMeta contiguous_meta(graph::DType dtype, std::vector<int64_t> sizes) {
  graph::TensorMeta meta;
  meta.dtype = dtype;
  meta.strides = graph::contiguous_strides(sizes);
  meta.sizes = std::move(sizes);
  return meta;
}

// Contiguous float32 metadata of these sizes.
inline graph::TensorMeta f32(std::vector<int64_t> sizes) {
  return contiguous_meta(graph::DType::Float32, std::move(sizes));
}

// Contiguous float64 metadata of these sizes.
inline graph::TensorMeta f64(std::vector<int64_t> sizes) {
  return contiguous_meta(graph::DType::Float64, std::move(sizes));
}

}  // namespace kiln::test
