// The loop-level IR of one kernel: an iteration space, some of whose dims
// may be reduced, strided inputs, a DAG of scalar expressions evaluated per
// point (reductions among them), and strided outputs. What the lowering
// (lower_pointwise, lower_group) produces from prims and what the CPU code
// generator compiles. See docs/architecture.md, "Inductor (CPU)".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/tensor_meta.h"

namespace kiln::inductor {

using graph::DType;

// Expression kinds, written once (Note [Kernel expressions]):
// X(enum name, text name, number of operands; -1: one or more)
#define KILN_KERNEL_EXPR_KINDS(X) \
  X(Load, "load", 0)              \
  X(LoadAt, "load_at", -1)        \
  X(Constant, "const", 0)         \
  X(Cast, "cast", 1)              \
  X(Unary, "unary", 1)            \
  X(Binary, "binary", 2)          \
  X(Compare, "cmp", 2)            \
  X(Select, "select", 3)           \
  X(Index, "index", 0)            \
  X(Reduce, "reduce", 1)

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

// Binary operators (operands and result of one dtype), those of prims
// of the same name: X(enum name, text name, floating only)
#define KILN_KERNEL_PRIM_BINARY_OPS(X) \
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

// Binary operators on int64 indices only, which are never negative (Note
// [Reshapes in kernels]): quotient and remainder, where truncating and
// flooring agree.
#define KILN_KERNEL_INDEX_BINARY_OPS(X) \
  X(IndexDiv, "index_div", false)       \
  X(IndexMod, "index_mod", false)

#define KILN_KERNEL_BINARY_OPS(X) KILN_KERNEL_PRIM_BINARY_OPS(X) KILN_KERNEL_INDEX_BINARY_OPS(X)

// Comparisons (operands of one dtype, bool result): X(enum name, text name)
#define KILN_KERNEL_COMPARE_OPS(X) \
  X(Eq, "eq")                      \
  X(Ne, "ne")                      \
  X(Lt, "lt")                      \
  X(Le, "le")                      \
  X(Gt, "gt")                      \
  X(Ge, "ge")

// Reduction operators: X(enum name, text name)
#define KILN_KERNEL_REDUCE_OPS(X) \
  X(Sum, "sum")                   \
  X(Prod, "prod")                 \
  X(Max, "max")                   \
  X(Min, "min")

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

enum class ReduceOp : int8_t {
#define KILN_KERNEL_ENUM(name, text) name,
  KILN_KERNEL_REDUCE_OPS(KILN_KERNEL_ENUM)
#undef KILN_KERNEL_ENUM
};

// Note [Kernel expressions]
// One scalar computation, evaluated at every point of the iteration space.
// Operands are ids of earlier expressions of the same kernel, so the list is
// a DAG in topological order and a shared subexpression is computed once.
// Load reads input `input` at the point; LoadAt reads it at the point
// moved by computed indices (Note [Loads at computed indices]); Constant is `constant` (integers
// and bools in `integer`) in `dtype`; Cast converts its operand to `dtype`;
// Unary, Binary and Compare apply `op` in their operands' dtype (Compare
// yields bool); Select(cond, a, b) picks a where the bool cond holds.
// Float16/BFloat16 are storage types only: loads of them are cast to
// float32 before any arithmetic, and stores cast back. Index is the int64
// sum over dims of the point's index times `strides` (one per dim,
// permuted and merged with the dims like an input's): argmax's flat
// position in the reduced dims of its input's own dim order (Note
// [Reduction lowering]).
// Reduce(x) applies ReduceOp `op` (in its dtype, x's) to x over every point
// that shares the current point's kept (unreduced) dims: its value is
// constant along the reduced dims (Note [Reduction kernels]).
struct Expr {
  ExprKind kind = ExprKind::Constant;
  DType dtype = DType::Float32;  // the value's dtype
  int8_t op = 0;                 // a UnaryOp, BinaryOp, CompareOp or ReduceOp
  int input = -1;                // Load: index into Kernel::inputs
  double constant = 0;           // Constant of a floating dtype
  int64_t integer = 0;           // Constant of an integer or bool dtype
  // Constant: a size the lowering read from the graph (a cat's bounds);
  // CUDA kernels of a size instance take it as an argument (Note [CUDA
  // run-time layout]). Not part of the kernel's text: CPU kernels compile
  // it in.
  bool size_value = false;
  std::vector<int> operands;     // expression ids
  std::vector<int64_t> strides;  // Index: per dim of the iteration space; LoadAt: per operand
};

// Note [Loads at computed indices]
// LoadAt(i0, ..., ik) reads input `input` at the element its strides and
// offset give for the point, plus sum_j ij * strides[j] (operands int64
// expressions, strides in elements). It is how a kernel reads a value
// whose index along some dim is not the point's own: a cat's pieces (the
// index along the cat dim minus the piece's start, clamped into the
// piece) and so torch.roll and F.pad's constant borders. Every LoadAt a
// lowering makes stays in bounds at every point of the space, selected or
// not: kernels evaluate both sides of a select (vector lanes do), so a
// piece is read at a clamped index and the select drops it.

// A tensor the kernel reads: element (i0, ..., in) lives at
// data + (offset + sum_d i_d * strides[d]) * itemsize. Broadcast dims have
// stride 0.
struct KernelInput {
  DType dtype = DType::Float32;
  std::vector<int64_t> strides;  // one per dim of the iteration space
  int64_t offset = 0;            // in elements, from the pointer passed in
};

// A tensor the kernel writes: expression `value` cast to `dtype`, stored
// with `strides` (one per dim of the iteration space; 0 only in reduced
// dims, for a value constant along them). With `has_tensor_shape` the
// tensor itself, as allocated, has `tensor_sizes` and `tensor_strides`
// (a reduction's result); otherwise the iteration space's sizes and
// `strides`.
struct KernelOutput {
  DType dtype = DType::Float32;
  std::vector<int64_t> strides;
  int value = -1;
  bool has_tensor_shape = false;
  std::vector<int64_t> tensor_sizes;
  std::vector<int64_t> tensor_strides;
};

// Note [Reduction kernels]
// A kernel whose `reduced` dims are not empty iterates its kept dims (the
// others) in the outer loops and, per kept point, runs phases over the
// reduced dims: phase k computes the Reduce expressions of stage k (stage:
// 1 + the highest stage of a Reduce it depends on), so a Reduce may use the
// results of earlier ones (softmax: max, then the sum of exp(x - max)). A
// last pass stores the outputs that vary along reduced dims; outputs
// constant along them are stored once per kept point. Loop order is dim
// order: kept dims, then reduced dims, then at most one more kept dim, the
// "tile" dim, which makes an outer reduction (e.g. a sum over dim 0 of a
// row-major matrix) accumulate many columns at once with unit-stride loads.
// Every kept dim is parallel; the code generator splits the first one
// (parallel_dim) across threads, or, for a kernel with few kept points,
// the outermost reduced dim (Note [Split reductions] in reduction_split.cpp).
struct Kernel {
  std::string name = "kernel";
  std::vector<int64_t> sizes;  // the iteration space
  std::vector<int> reduced;    // reduced dims, ascending (Note [Reduction kernels])
  std::vector<KernelInput> inputs;
  std::vector<Expr> exprs;
  std::vector<KernelOutput> outputs;

  // Appends an expression; returns its id. Checks nothing (verify() does).
  int add(Expr expr);
  // Shorthands for add(). Binary/Compare operands must share a dtype.
  int load(int input);
  int constant(DType dtype, double value);
  // An int64 constant that is a size (Expr::size_value).
  int size_constant(int64_t value);
  int cast(int operand, DType dtype);
  int unary(UnaryOp op, int operand);
  int binary(BinaryOp op, int a, int b);
  int compare(CompareOp op, int a, int b);
  int select(int cond, int a, int b);
  int reduce(ReduceOp op, int operand);
  int index(std::vector<int64_t> strides);
  // input[point + sum_j indices[j] * strides[j]] (Note [Loads at computed indices]).
  int load_at(int input, std::vector<int> indices, std::vector<int64_t> strides);
  // Adds an input; returns its index.
  int add_input(KernelInput input);
  // Adds an output writing expression `value`; returns its index.
  int add_output(KernelOutput output);
};

// Checks the kernel's invariants (operand ids earlier, arities, dtypes that
// agree, stride ranks, bool/float-only ops, no low-precision arithmetic,
// the reduced dims' layout and outputs that fit them). Returns "" or the
// first problem found.
std::string verify(const Kernel& kernel);

// Per expression: the stage of Note [Reduction kernels] (0: uses no Reduce).
std::vector<int> expr_stages(const Kernel& kernel);

// Per expression: whether its value can differ between points that differ
// only in reduced dims (a load with a nonzero stride in one, or an operand
// that does; never a Reduce).
std::vector<bool> expr_varies(const Kernel& kernel);

// True for dim d of `kernel` in its reduced list.
bool is_reduced(const Kernel& kernel, int d);

// The dim whose index range a call covers (Note [CPU kernel ABI]): the
// first kept dim in loop order; -1 when every dim is reduced (or rank 0).
int parallel_dim(const Kernel& kernel);

// The kept dim after the reduced ones (Note [Reduction kernels]), or -1.
int tile_dim(const Kernel& kernel);

// Drops size-1 dims (keeping one reduced dim) and merges adjacent dims of
// one kind (kept, or reduced; the tile dim stays alone) wherever every
// input and output steps through them as through one dim, so loops are
// longer and the parallel dim larger ([1, 4096, C] rows split over threads
// like [4096, C]). Outputs keep their tensor shape (has_tensor_shape is set).
void coalesce_dims(Kernel& kernel);

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
const char* reduce_op_name(ReduceOp op);

// True for dtypes the kernel IR computes with (bool, integers, f32, f64).
bool is_compute_dtype(DType dtype);

// Bytes per element of a dtype kernels read or write.
int64_t item_size(DType dtype);

}  // namespace kiln::inductor
