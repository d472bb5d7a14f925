// Small prim compositions the derivative rules share.
#pragma once

#include <vector>

#include "prims/prim_builder.h"

namespace kiln::autograd {

// Note [Metas by value]: appending a node may move the graph's values, so a
// reference from b.meta() dies at the next append. The helpers take metas and
// sizes by value, and rules copy the metas they keep.

// Sums gradient `g` down to `target`'s sizes (undoing broadcasting: leading
// dims summed away, dims of size 1 summed with keepdim) and casts it to
// `target`'s dtype.
int sum_to(prims::PrimBuilder& b, int g, graph::TensorMeta target);

// Casts `g` to `dtype` when it differs.
int cast_to(prims::PrimBuilder& b, int g, graph::DType dtype);

// Expands the result `g` of a reduction over `dims` (keepdim or not) back to
// `sizes`.
int expand_reduced(prims::PrimBuilder& b, int g, const std::vector<int64_t>& dims, bool keepdim,
                   std::vector<int64_t> sizes);

// An argument of a builder call for a value id.
inline prims::PrimArg v(int id) { return prims::PrimArg::of_value(id); }
// An argument of a builder call for a float constant.
inline prims::PrimArg f(double x) { return prims::PrimArg::of_scalar(prims::Scalar::of_float(x)); }

}  // namespace kiln::autograd

namespace kiln::autograd {

// A tensor of zeros with `like`'s sizes, dtype and device (contiguous).
int zeros_like(prims::PrimBuilder& b, graph::TensorMeta like);

}  // namespace kiln::autograd
