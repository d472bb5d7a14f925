// The primitive op set that torch-level ops decompose into before autograd
// and code generation. The list is written once (KILN_PRIM_LIST) and expanded
// into the Prim enum, the name table and the per-prim facts below.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "prims/type_promotion.h"

namespace kiln::prims {

// What kind of rule computes a prim's output metadata.
#define KILN_PRIM_FAMILIES(X)                                                      \
  X(Unary, "elementwise over one tensor")                                          \
  X(Binary, "elementwise over two operands (tensors or Python scalars), broadcast") \
  X(Ternary, "elementwise over three operands, broadcast")                         \
  X(Convert, "a copy with a new dtype or layout")                                  \
  X(Reduction, "reduces dims of one tensor")                                       \
  X(View, "aliases its input's storage with new sizes/strides")                    \
  X(Cat, "concatenates tensors along a dim")                                       \
  X(Matmul, "batched matrix product, batch dims broadcast")                        \
  X(Index, "reads or writes through an index tensor")                              \
  X(Factory, "makes a tensor from sizes and a value")                              \
  X(Random, "draws from torch's generator")                                        \
  X(Extern, "an op kept as a torch call; its metadata is given from outside")

enum class Family : int8_t {
#define KILN_FAMILY_ENUM(name, doc) name,
  KILN_PRIM_FAMILIES(KILN_FAMILY_ENUM)
#undef KILN_FAMILY_ENUM
};

// Flag bits of a prim, checked by the meta rules.
enum PrimFlag : uint16_t {
  kNoFlags = 0,
  kView = 1 << 0,             // the output aliases the input (reshape: when it can)
  kNoBool = 1 << 1,           // rejects a bool common dtype (neg, floor, pow)
  kNoBoolOperand = 1 << 2,    // rejects any bool operand (sub)
  kNoComplex = 1 << 3,        // rejects complex dtypes (ordering, rounding)
  kIntegralOnly = 1 << 4,     // bool and integer dtypes only (bitwise ops)
  kFloatingOnly = 1 << 5,     // floating (and complex where noted) only
  kMultiOutput = 1 << 6,      // more than one output (var_mean)
};

// Note [Prim list]
// X(enum name, torch-style name, family, tensor arity (-1: variadic),
//   promotion kind for elementwise prims, flags)
// Arity counts tensor inputs; binary and ternary operands may also be Python
// scalars. Elementwise prims promote like torch's ops of the same name; the
// decompositions call them with torch's semantics. div is true division;
// floor_divide and trunc_divide are torch.div's rounding modes.
#define KILN_PRIM_LIST(X)                                                                  \
  /* pointwise unary */                                                                    \
  X(Abs, "abs", Unary, 1, ComplexToFloat, kNoBool)                                         \
  X(Neg, "neg", Unary, 1, Default, kNoBool)                                                \
  X(Exp, "exp", Unary, 1, IntToFloat, kNoFlags)                                            \
  X(Exp2, "exp2", Unary, 1, IntToFloat, kNoFlags)                                          \
  X(Log, "log", Unary, 1, IntToFloat, kNoFlags)                                            \
  X(Log2, "log2", Unary, 1, IntToFloat, kNoFlags)                                          \
  X(Log1p, "log1p", Unary, 1, IntToFloat, kNoFlags)                                        \
  X(Expm1, "expm1", Unary, 1, IntToFloat, kNoFlags)                                        \
  X(Sqrt, "sqrt", Unary, 1, IntToFloat, kNoFlags)                                          \
  X(Rsqrt, "rsqrt", Unary, 1, IntToFloat, kNoFlags)                                        \
  X(Sin, "sin", Unary, 1, IntToFloat, kNoFlags)                                            \
  X(Cos, "cos", Unary, 1, IntToFloat, kNoFlags)                                            \
  X(Tan, "tan", Unary, 1, IntToFloat, kNoFlags)                                            \
  X(Tanh, "tanh", Unary, 1, IntToFloat, kNoFlags)                                          \
  X(Sigmoid, "sigmoid", Unary, 1, IntToFloat, kNoFlags)                                    \
  X(Erf, "erf", Unary, 1, IntToFloat, kNoComplex)                                          \
  X(Floor, "floor", Unary, 1, Default, kNoBool | kNoComplex)                               \
  X(Ceil, "ceil", Unary, 1, Default, kNoBool | kNoComplex)                                 \
  X(Round, "round", Unary, 1, Default, kNoBool | kNoComplex)                               \
  X(Trunc, "trunc", Unary, 1, Default, kNoBool | kNoComplex)                               \
  X(Sign, "sign", Unary, 1, Default, kNoComplex)                                           \
  X(Reciprocal, "reciprocal", Unary, 1, IntToFloat, kNoFlags)                              \
  X(LogicalNot, "logical_not", Unary, 1, AlwaysBool, kNoFlags)                             \
  X(BitwiseNot, "bitwise_not", Unary, 1, Default, kIntegralOnly)                           \
  X(IsNan, "isnan", Unary, 1, AlwaysBool, kNoFlags)                                        \
  X(IsInf, "isinf", Unary, 1, AlwaysBool, kNoFlags)                                        \
  /* pointwise binary */                                                                   \
  X(Add, "add", Binary, 2, Default, kNoFlags)                                              \
  X(Sub, "sub", Binary, 2, Default, kNoBoolOperand)                                        \
  X(Mul, "mul", Binary, 2, Default, kNoFlags)                                              \
  X(Div, "div", Binary, 2, IntToFloat, kNoFlags)                                           \
  X(FloorDivide, "floor_divide", Binary, 2, Default, kNoBool | kNoComplex)                 \
  X(TruncDivide, "trunc_divide", Binary, 2, Default, kNoBool | kNoComplex)                 \
  X(Pow, "pow", Binary, 2, Default, kNoBool)                                               \
  X(Maximum, "maximum", Binary, 2, Default, kNoComplex)                                    \
  X(Minimum, "minimum", Binary, 2, Default, kNoComplex)                                    \
  X(Atan2, "atan2", Binary, 2, IntToFloat, kNoComplex)                                     \
  X(Fmod, "fmod", Binary, 2, Default, kNoBool | kNoComplex)                                       \
  X(Remainder, "remainder", Binary, 2, Default, kNoBool | kNoComplex)                             \
  X(Eq, "eq", Binary, 2, AlwaysBool, kNoFlags)                                             \
  X(Ne, "ne", Binary, 2, AlwaysBool, kNoFlags)                                             \
  X(Lt, "lt", Binary, 2, AlwaysBool, kNoComplex)                                           \
  X(Le, "le", Binary, 2, AlwaysBool, kNoComplex)                                           \
  X(Gt, "gt", Binary, 2, AlwaysBool, kNoComplex)                                           \
  X(Ge, "ge", Binary, 2, AlwaysBool, kNoComplex)                                           \
  X(LogicalAnd, "logical_and", Binary, 2, AlwaysBool, kNoFlags)                            \
  X(LogicalOr, "logical_or", Binary, 2, AlwaysBool, kNoFlags)                              \
  X(LogicalXor, "logical_xor", Binary, 2, AlwaysBool, kNoFlags)                            \
  X(BitwiseAnd, "bitwise_and", Binary, 2, Default, kIntegralOnly)                          \
  X(BitwiseOr, "bitwise_or", Binary, 2, Default, kIntegralOnly)                            \
  X(BitwiseXor, "bitwise_xor", Binary, 2, Default, kIntegralOnly)                          \
  /* pointwise ternary: where(cond, a, b) promotes a and b; cond is bool */                \
  X(Where, "where", Ternary, 3, Default, kNoFlags)                                         \
  /* copies */                                                                             \
  X(ConvertElementType, "convert_element_type", Convert, 1, None, kNoFlags)                \
  X(Clone, "clone", Convert, 1, None, kNoFlags)                                            \
  /* reductions over dims, with keepdim */                                                 \
  X(Sum, "sum", Reduction, 1, None, kNoFlags)                                              \
  X(Prod, "prod", Reduction, 1, None, kNoFlags)                                            \
  X(Amax, "amax", Reduction, 1, None, kNoComplex)                                          \
  X(Amin, "amin", Reduction, 1, None, kNoComplex)                                          \
  X(Argmax, "argmax", Reduction, 1, None, kNoBool | kNoComplex)                            \
  X(Argmin, "argmin", Reduction, 1, None, kNoBool | kNoComplex)                            \
  X(VarMean, "var_mean", Reduction, 1, None, kFloatingOnly | kMultiOutput)                 \
  /* views */                                                                              \
  X(Reshape, "reshape", View, 1, None, kView)                                              \
  X(View, "view", View, 1, None, kView)                                                    \
  X(Expand, "expand", View, 1, None, kView)                                                \
  X(Permute, "permute", View, 1, None, kView)                                              \
  X(Slice, "slice", View, 1, None, kView)                                                  \
  X(Squeeze, "squeeze", View, 1, None, kView)                                              \
  X(Unsqueeze, "unsqueeze", View, 1, None, kView)                                          \
  X(AsStrided, "as_strided", View, 1, None, kView)                                         \
  /* joins, products, indexing */                                                          \
  X(Cat, "cat", Cat, -1, None, kNoFlags)                                                   \
  X(Matmul, "matmul", Matmul, 2, None, kNoFlags)                                           \
  X(Gather, "gather", Index, 2, None, kNoFlags)                                             \
  X(Scatter, "scatter", Index, 3, None, kNoFlags)                                          \
  X(IndexSelect, "index_select", Index, 2, None, kNoFlags)                                 \
  X(IndexPut, "index_put", Index, -1, None, kNoFlags)                                      \
  /* factories and random draws */                                                         \
  X(Full, "full", Factory, 0, None, kNoFlags)                                              \
  X(Iota, "iota", Factory, 0, None, kNoFlags)                                              \
  X(Uniform, "uniform", Random, 0, None, kFloatingOnly)                                    \
  X(Normal, "normal", Random, 0, None, kFloatingOnly)                                      \
  X(Bernoulli, "bernoulli", Random, 1, None, kFloatingOnly)                                \
  /* an op kept as a torch call */                                                         \
  X(Extern, "extern", Extern, -1, None, kNoFlags)

// One primitive op.
enum class Prim : uint8_t {
#define KILN_PRIM_ENUM(name, text, family, arity, promotion, flags) name,
  KILN_PRIM_LIST(KILN_PRIM_ENUM)
#undef KILN_PRIM_ENUM
};

// The facts the list records about one prim.
struct PrimInfo {
  const char* name;
  Family family;
  int8_t arity;  // tensor inputs; -1 for variadic
  PromotionKind promotion;
  uint16_t flags;
};

// Number of prims in the list.
int prim_count();

// Returns the facts recorded for `prim`.
const PrimInfo& prim_info(Prim prim);

// Returns the prim's name, e.g. "floor_divide".
const char* prim_name(Prim prim);

// Looks a prim up by name; nullopt when no prim has that name.
std::optional<Prim> prim_from_name(std::string_view name);

// True when the prim has the flag bit set.
inline bool has_flag(Prim prim, PrimFlag flag) { return (prim_info(prim).flags & flag) != 0; }

// Returns the family's name, e.g. "Reduction".
const char* family_name(Family family);

}  // namespace kiln::prims
