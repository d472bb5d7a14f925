// CUDA C text of the kernel IR's types, constants and operations, for the
// source writer (cuda_source.cpp): one spelling per op and dtype.
#pragma once

#include <cstdint>
#include <string>

#include "inductor/cuda/cuda_source.h"

namespace kiln::inductor::cuda::detail {

// True for float32 and float64.
bool is_float(DType d);
// The C type a value of `d` is computed in (float16/bfloat16: its bits).
const char* value_type(DType d);
// The C type a tensor of `d` holds in memory.
const char* storage_type(DType d);
// `v` as an exact C literal of dtype `d`.
std::string float_literal(double v, DType d);
// `v` as a C literal of dtype `d`.
std::string int_literal(int64_t v, DType d);
// A constant expression's C literal.
std::string constant_text(const Expr& e);
// `x`, a value of dtype `from`, as a value of `to` (llvm_codegen's cast).
std::string cast_text(const std::string& x, DType from, DType to);
// The value a reduction starts from.
std::string reduce_init(ReduceOp op, DType d);
// acc combined with x (both of dtype d).
std::string combine_text(ReduceOp op, DType d, const std::string& acc, const std::string& x);
// The C expression of a unary, binary or comparison op.
std::string unary_text(UnaryOp op, const std::string& x, DType d);
std::string binary_text(BinaryOp op, const std::string& a, const std::string& b, DType d);
std::string compare_text(CompareOp op, const std::string& a, const std::string& b);
// The helpers every generated source starts with (vector types, NaN-aware
// min/max, half-precision arithmetic, warp shuffles).
const char* cuda_prelude();

}  // namespace kiln::inductor::cuda::detail
