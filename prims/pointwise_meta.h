// Meta rules of the elementwise prims (unary, binary, ternary) and of the
// copies (convert_element_type, clone).
#pragma once

#include <vector>

#include "graph/tensor_meta.h"
#include "prims/layout.h"
#include "prims/prim.h"
#include "prims/type_promotion.h"

namespace kiln::prims {

// The output of an elementwise prim over `operands` (tensors or Python
// scalars, in torch's argument order; where's are cond, a, b). Sizes
// broadcast, the dtype follows the prim's promotion kind, strides follow
// TensorIterator. Throws PrimError for a wrong operand count, shapes that do
// not broadcast, a dtype the prim rejects, or tensors on different devices.
graph::TensorMeta pointwise_meta(Prim prim, const std::vector<Operand>& operands,
                                 DType default_float = DType::Float32);

// The dtypes an elementwise prim computes in and returns for `operands`
// (checked as pointwise_meta checks them).
ElementwiseDTypes pointwise_dtypes(Prim prim, const std::vector<Operand>& operands,
                                   DType default_float = DType::Float32);

// convert_element_type(a, dtype): a copy in `dtype` with a's layout preserved
// (as Tensor.to(dtype, copy=True)).
graph::TensorMeta convert_element_type_meta(const graph::TensorMeta& a, DType dtype);

// clone(a, memory_format): a copy in the given layout (Preserve keeps a's).
graph::TensorMeta clone_meta(const graph::TensorMeta& a,
                             MemoryFormat format = MemoryFormat::Preserve);

}  // namespace kiln::prims
