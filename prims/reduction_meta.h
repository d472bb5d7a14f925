// Meta rules of the reduction prims: sum, prod, amax, amin, argmax, argmin
// and var_mean, over a list of dims with keepdim. Results are contiguous, as
// torch allocates them whatever the input's layout.
#pragma once

#include <optional>
#include <vector>

#include "graph/tensor_meta.h"
#include "prims/prim.h"

namespace kiln::prims {

// The output of sum/prod/amax/amin/argmax/argmin over `dims` (empty: every
// dim; argmax/argmin take at most one dim). `dtype` is sum's and prod's
// dtype= argument; without it bool and integers sum to int64. Throws
// PrimError for dims out of range or repeated, a dtype the prim rejects, or
// (max/min family) a reduction over zero elements.
graph::TensorMeta reduction_meta(Prim prim, const graph::TensorMeta& a,
                                 const std::vector<int64_t>& dims, bool keepdim,
                                 std::optional<DType> dtype = std::nullopt);

// var_mean's two outputs.
struct VarMeanMeta {
  graph::TensorMeta var;   // real dtype (float32 for complex64 input)
  graph::TensorMeta mean;  // the input's dtype
};

// var_mean(a, dims, correction, keepdim). The correction (Bessel's, 1 by
// default) does not change metadata. Throws PrimError for non-floating input.
VarMeanMeta var_mean_meta(const graph::TensorMeta& a, const std::vector<int64_t>& dims,
                          bool keepdim);

}  // namespace kiln::prims
