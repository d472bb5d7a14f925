// The loop-level IR of one pointwise kernel: an iteration space (the
// outputs' sizes), strided inputs, a DAG of scalar expressions evaluated once
// per point, and strided outputs. What lower_pointwise produces from prims
// and what the CPU code generator compiles. See docs/architecture.md,
// "Inductor (CPU), first slice".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::inductor {

using graph::DType;

// Expression kinds, written once (Note [Kernel expressions]):
// X(enum name, text name, number of operands)
#define KILN_KERNEL_EXPR_KINDS(X) \
  X(Load, "load", 0)              \
  X(Constant, "const", 0)         \
  X(Cast, "cast", 1)              \
  X(Unary, "unary", 1)            \
  X(Binary, "binary", 2)          \
  X(Compare, "cmp", 2)            \
  X(Select, "select", 3)

// Unary operators: X(enum name, text name, floating only)
#define KILN_KERNEL_UNARY_OPS(X) \
  X(Neg, "neg", false)           \
  X(Abs, "abs", false)           \
  X(Exp, "exp", true)            \
  X(Exp2, "exp2", true)          \
  X(Expm1, "expm1", true)        \
  X(Log, "log", true)            \
  X(Log2, "log2", true)          \
  X(Log1p, "log1p", true)        \
  X(Sqrt, "sqrt", true)          \
  X(Rsqrt, "rsqrt", true)        \
  X(Sin, "sin", true)            \
  X(Cos, "cos", true)            \
  X(Tan, "tan", true)            \
  X(Tanh, "tanh", true)          \
  X(Sigmoid, "sigmoid", true)    \
  X(Erf, "erf", true)            \
  X(Floor, "floor", true)        \
  X(Ceil, "ceil", true)          \
  X(Round, "round", true)        \
  X(Trunc, "trunc", true)        \
  X(Reciprocal, "reciprocal", true) \
  X(IsNan, "isnan", true)        \
  X(LogicalNot, "logical_not", false)

// Binary operators (operands and result of one dtype):
// X(enum name, text name, floating only)
#define KILN_KERNEL_BINARY_OPS(X) \
  X(Add, "add", false)            \
  X(Sub, "sub", false)            \
  X(Mul, "mul", false)            \
  X(Div, "div", true)             \
  X(Maximum, "maximum", false)    \
  X(Minimum, "minimum", false)    \
  X(Pow, "pow", true)             \
  X(LogicalAnd, "logical_and", false) \
  X(LogicalOr, "logical_or", false)   \
  X(LogicalXor, "logical_xor", false) \
  X(BitwiseAnd, "bitwise_and", false) \
  X(BitwiseOr, "bitwise_or", false)   \
  X(BitwiseXor, "bitwise_xor", false)

// Comparisons (operands of one dtype, bool result): X(enum name, text name)
#define KILN_KERNEL_COMPARE_OPS(X) \
  X(Eq, "eq")                      \
  X(Ne, "ne")                      \
  X(Lt, "lt")                      \
  X(Le, "le")                      \
  X(Gt, "gt")                      \
  X(Ge, "ge")

enum class ExprKind : int8_t {
#define KILN_KERNEL_ENUM(name, text, operands) name,
  KILN_KERNEL_EXPR_KINDS(KILN_KERNEL_ENUM)
#undef KILN_KERNEL_ENUM
};

enum class UnaryOp : int8_t {
#define KILN_KERNEL_ENUM(name, text, floating) name,
  KILN_KERNEL_UNARY_OPS(KILN_KERNEL_ENUM)
#undef KILN_KERNEL_ENUM
};

enum class BinaryOp : int8_t {
#define KILN_KERNEL_ENUM(name, text, floating) name,
  KILN_KERNEL_BINARY_OPS(KILN_KERNEL_ENUM)
#undef KILN_KERNEL_ENUM
};

enum class CompareOp : int8_t {
#define KILN_KERNEL_ENUM(name, text) name,
  KILN_KERNEL_COMPARE_OPS(KILN_KERNEL_ENUM)
#undef KILN_KERNEL_ENUM
};

// Note [Kernel expressions]
// One scalar computation, evaluated at every point of the iteration space.
// Operands are ids of earlier expressions of the same kernel, so the list is
// a DAG in topological order and a shared subexpression is computed once.
// Load reads input `input` at the point; Constant is `constant` (integers
// and bools in `integer`) in `dtype`; Cast converts its operand to `dtype`;
// Unary, Binary and Compare apply `op` in their operands' dtype (Compare
// yields bool); Select(cond, a, b) picks a where the bool cond holds.
// Float16/BFloat16 are storage types only: loads of them are cast to
// float32 before any arithmetic, and stores cast back.
struct Expr {
  ExprKind kind = ExprKind::Constant;
  DType dtype = DType::Float32;  // the value's dtype
  int8_t op = 0;                 // a UnaryOp, BinaryOp or CompareOp
  int input = -1;                // Load: index into Kernel::inputs
  double constant = 0;           // Constant of a floating dtype
  int64_t integer = 0;           // Constant of an integer or bool dtype
  std::vector<int> operands;     // expression ids
};

// A tensor the kernel reads: element (i0, ..., in) lives at
// data + (offset + sum_d i_d * strides[d]) * itemsize. Broadcast dims have
// stride 0.
struct KernelInput {
  DType dtype = DType::Float32;
  std::vector<int64_t> strides;  // one per dim of the iteration space
  int64_t offset = 0;            // in elements, from the pointer passed in
};

// A tensor the kernel writes: expression `value` cast to `dtype`, stored
// with `strides` (one per dim of the iteration space, none of them 0).
struct KernelOutput {
  DType dtype = DType::Float32;
  std::vector<int64_t> strides;
  int value = -1;
};

// One pointwise kernel.
struct Kernel {
  std::string name = "kernel";
  std::vector<int64_t> sizes;  // the iteration space (every output's sizes)
  std::vector<KernelInput> inputs;
  std::vector<Expr> exprs;
  std::vector<KernelOutput> outputs;

  // Appends an expression; returns its id. Checks nothing (verify() does).
  int add(Expr expr);
  // Shorthands for add(). Binary/Compare operands must share a dtype.
  int load(int input);
  int constant(DType dtype, double value);
  int cast(int operand, DType dtype);
  int unary(UnaryOp op, int operand);
  int binary(BinaryOp op, int a, int b);
  int compare(CompareOp op, int a, int b);
  int select(int cond, int a, int b);
  // Adds an input; returns its index.
  int add_input(KernelInput input);
  // Adds an output writing expression `value`; returns its index.
  int add_output(KernelOutput output);
};

// Checks the kernel's invariants (operand ids earlier, arities, dtypes that
// agree, stride ranks, bool/float-only ops, no low-precision arithmetic).
// Returns "" or the first problem found.
std::string verify(const Kernel& kernel);

// The kernel's text form, for logs and tests:
//   kernel add(4, 8)
//     in0: f32 strides=(8, 1) offset=0
//     %0 = load in0 : f32
//     %1 = const 1.0 : f32
//     %2 = add(%0, %1) : f32
//     out0: f32 strides=(8, 1) = %2
std::string format_kernel(const Kernel& kernel);

// Names, e.g. "load", "erf", "maximum", "gt".
const char* expr_kind_name(ExprKind kind);
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* compare_op_name(CompareOp op);

// True for dtypes the kernel IR computes with (bool, integers, f32, f64).
bool is_compute_dtype(DType dtype);

// Bytes per element of a dtype kernels read or write.
int64_t item_size(DType dtype);

}  // namespace kiln::inductor
