// torch's result-type rules for elementwise ops: dtype categories, the
// priority of dimensioned tensors over 0-dim tensors over Python scalars, and
// the promotion kinds torch's elementwise ops apply to the common dtype.
// See Note [Result type].
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::prims {

using graph::DType;

// The Python type of a scalar operand (torch wraps it as a 0-dim tensor
// that yields to every tensor of the same category).
enum class ScalarKind : int8_t { Bool, Int, Float, Complex };

// How an elementwise op turns its operands' common dtype into its result
// dtype, as torch's ELEMENTWISE_TYPE_PROMOTION_KIND. `None` marks prims that
// are not elementwise (their rule picks the dtype).
#define KILN_PROMOTION_KINDS(X)                                               \
  X(None, "not elementwise")                                                  \
  X(Default, "the common dtype (add, mul, maximum, where, ...)")              \
  X(IntToFloat, "bool and integers compute in the default float (exp, div)")  \
  X(AlwaysBool, "the result is bool (eq, isnan, logical_and)")                \
  X(ComplexToFloat, "complex results become real (abs)")

enum class PromotionKind : int8_t {
#define KILN_PROMOTION_ENUM(name, doc) name,
  KILN_PROMOTION_KINDS(KILN_PROMOTION_ENUM)
#undef KILN_PROMOTION_ENUM
};

// An elementwise op's operand: a tensor's metadata or a Python scalar.
struct Operand {
  std::optional<graph::TensorMeta> tensor;  // set for tensor operands
  ScalarKind scalar = ScalarKind::Float;    // meaningful when !tensor

  // An operand for a tensor with this metadata.
  static Operand of(const graph::TensorMeta& meta) { return Operand{meta, ScalarKind::Float}; }
  // An operand for a Python scalar of this kind.
  static Operand of(ScalarKind kind) { return Operand{std::nullopt, kind}; }
  bool is_tensor() const { return tensor.has_value(); }
};

// The dtypes an elementwise op computes in and returns.
struct ElementwiseDTypes {
  DType common;  // what the inputs are converted to before computing
  DType result;  // the output tensor's dtype
};

// True for bool.
inline bool is_bool(DType d) { return d == DType::Bool; }
// True for the signed and unsigned integer dtypes (not bool).
bool is_integer(DType d);
// True for float16, bfloat16, float32, float64.
bool is_floating(DType d);
// True for complex64 and complex128.
bool is_complex(DType d);

// Returns the real dtype of a complex one (complex64 -> float32); others unchanged.
DType to_real(DType d);

// The dtype a Python scalar takes when it decides the result (bool, int64,
// the default float, or its complex counterpart).
DType scalar_dtype(ScalarKind kind, DType default_float = DType::Float32);

// torch.promote_types(a, b). Throws PrimError for dtypes kiln does not model.
DType promote_types(DType a, DType b);

// torch.result_type over the operands (at least one). Throws PrimError when
// the result would be a dtype kiln does not model (complex32).
DType result_type(const char* op, const std::vector<Operand>& operands,
                  DType default_float = DType::Float32);

// The common and result dtypes of an elementwise op of the given kind.
ElementwiseDTypes elementwise_dtypes(const char* op, const std::vector<Operand>& operands,
                                     PromotionKind kind, DType default_float = DType::Float32);

// Returns the kind's name, e.g. "IntToFloat".
const char* promotion_kind_name(PromotionKind kind);

}  // namespace kiln::prims
