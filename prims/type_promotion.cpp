#include "prims/type_promotion.h"

#include <string>

#include "prims/prim_error.h"

namespace kiln::prims {
namespace {

// Note [Result type]
// torch.result_type keeps one running dtype per priority class: tensors with
// dims, 0-dim tensors, and Python scalars (wrapped numbers). Within a class
// dtypes promote with promote_types. Across classes a lower class only
// matters when it is of a higher category (bool < integer < floating <
// complex): an int32 tensor plus a float64 0-dim tensor is float64, plus a
// Python float it is the default float, but a uint8 tensor plus a Python int
// (or an int8 0-dim tensor) stays uint8. A floating tensor meeting a complex
// lower class keeps its precision: float64 + 1j is complex128, and float16 +
// 1j would be complex32, which kiln does not model (bfloat16 + 1j is
// complex64).

enum class Category : int8_t { Bool, Integer, Floating, Complex };

Category category(DType d) {
  if (is_bool(d)) return Category::Bool;
  if (is_integer(d)) return Category::Integer;
  if (is_floating(d)) return Category::Floating;
  return Category::Complex;
}

int byte_size(DType d) {
  switch (d) {
    case DType::Bool: case DType::UInt8: case DType::Int8: return 1;
    case DType::Int16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Float32: return 4;
    case DType::Int64: case DType::Float64: case DType::Complex64: return 8;
    case DType::Complex128: return 16;
    case DType::Other: break;
  }
  return 0;
}

void check_modelled(DType d) {
  if (d == DType::Other) throw PrimError("promote_types: kiln does not model this dtype");
}

// A running dtype per priority class; nullopt until an operand of that class is seen.
struct ResultState {
  std::optional<DType> dimensioned, zero_dim, wrapped;
};

void update(std::optional<DType>& slot, DType d) {
  slot = slot ? promote_types(*slot, d) : d;
}

// combine_categories: `higher` wins unless `lower` is of a higher category.
std::optional<DType> combine(const char* op, std::optional<DType> higher,
                             std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_complex(*higher)) return higher;
  if (is_complex(*lower)) {
    if (is_floating(*higher)) {
      switch (*higher) {
        case DType::Float64: return DType::Complex128;
        // bfloat16 has float32's range, so torch pairs it with complex64.
        case DType::Float32: case DType::BFloat16: return DType::Complex64;
        default:
          fail(op, std::string("a ") + graph::dtype_name(*higher) +
                       " tensor with a complex operand gives complex32, which kiln does not model");
      }
    }
    return lower;
  }
  if (is_floating(*higher)) return higher;
  if (is_bool(*higher) || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

bool is_integer(DType d) {
  return d == DType::UInt8 || d == DType::Int8 || d == DType::Int16 || d == DType::Int32 ||
         d == DType::Int64;
}

bool is_floating(DType d) {
  return d == DType::Float16 || d == DType::BFloat16 || d == DType::Float32 || d == DType::Float64;
}

bool is_complex(DType d) { return d == DType::Complex64 || d == DType::Complex128; }

DType to_real(DType d) {
  if (d == DType::Complex64) return DType::Float32;
  if (d == DType::Complex128) return DType::Float64;
  return d;
}

DType scalar_dtype(ScalarKind kind, DType default_float) {
  switch (kind) {
    case ScalarKind::Bool: return DType::Bool;
    case ScalarKind::Int: return DType::Int64;
    case ScalarKind::Float: return default_float;
    case ScalarKind::Complex: break;
  }
  return default_float == DType::Float64 ? DType::Complex128 : DType::Complex64;
}

DType promote_types(DType a, DType b) {
  check_modelled(a);
  check_modelled(b);
  if (a == b) return a;
  if (is_bool(a)) return b;
  if (is_bool(b)) return a;
  const Category ca = category(a), cb = category(b);
  if (ca != cb) {
    // Integers yield to floats and complex; a float meets a complex at the
    // larger of the two precisions.
    if (ca == Category::Integer) return b;
    if (cb == Category::Integer) return a;
    const DType complex = ca == Category::Complex ? a : b;
    const DType real = ca == Category::Complex ? b : a;
    return real == DType::Float64 ? DType::Complex128 : complex;
  }
  if (ca == Category::Integer) {
    // uint8 has no signed counterpart of its size: with int8 both fit in int16.
    const bool a_unsigned = a == DType::UInt8, b_unsigned = b == DType::UInt8;
    if (a_unsigned || b_unsigned) {
      const DType other = a_unsigned ? b : a;
      return other == DType::Int8 ? DType::Int16 : other;
    }
  }
  if ((a == DType::Float16 && b == DType::BFloat16) ||
      (a == DType::BFloat16 && b == DType::Float16)) {
    return DType::Float32;
  }
  return byte_size(a) >= byte_size(b) ? a : b;
}

DType result_type(const char* op, const std::vector<Operand>& operands, DType default_float) {
  if (operands.empty()) fail(op, "expected at least one operand");
  ResultState state;
  for (const Operand& operand : operands) {
    if (!operand.is_tensor()) {
      update(state.wrapped, scalar_dtype(operand.scalar, default_float));
    } else if (operand.tensor->sizes.empty()) {
      update(state.zero_dim, operand.tensor->dtype);
    } else {
      update(state.dimensioned, operand.tensor->dtype);
    }
  }
  return *combine(op, state.dimensioned, combine(op, state.zero_dim, state.wrapped));
}

ElementwiseDTypes elementwise_dtypes(const char* op, const std::vector<Operand>& operands,
                                     PromotionKind kind, DType default_float) {
  const DType common = result_type(op, operands, default_float);
  switch (kind) {
    case PromotionKind::IntToFloat: {
      const DType computed = is_bool(common) || is_integer(common) ? default_float : common;
      return {computed, computed};
    }
    case PromotionKind::AlwaysBool: return {common, DType::Bool};
    case PromotionKind::ComplexToFloat: return {common, to_real(common)};
    case PromotionKind::None:
    case PromotionKind::Default: break;
  }
  return {common, common};
}

const char* promotion_kind_name(PromotionKind kind) {
  static constexpr const char* kNames[] = {
#define KILN_PROMOTION_NAME(name, doc) #name,
      KILN_PROMOTION_KINDS(KILN_PROMOTION_NAME)
#undef KILN_PROMOTION_NAME
  };
  return kNames[static_cast<int>(kind)];
}

}  // namespace kiln::prims
