// Decompositions of elementwise arithmetic, comparisons, unary math,
// where/clamp and the pointwise activations (relu, silu, gelu).
#include <cmath>

#include "prims/decompositions.h"
#include "prims/factory_meta.h"

namespace kiln::prims {
namespace {

PrimArg v(int id) { return PrimArg::of_value(id); }
PrimArg f(double x) { return PrimArg::of_scalar(Scalar::of_float(x)); }

// Two Python numbers (torch.div(seq_len, window, rounding_mode="trunc") of
// sizes, Longformer): torch makes a 0-dim tensor of the result's dtype, so
// the first number becomes one. Comparisons (a bool result) stay calls.
PrimArg number_as_tensor(DecomposeCall& c, PrimArg x) {
  const graph::TensorMeta& out = c.traced();
  if (out.dtype == DType::Bool || !out.sizes.empty()) c.unsupported("no tensor operand");
  return v(c.b.full({}, x.scalar, out.dtype, Placement{out.device_type, out.device_index, false}));
}

// prim(input, other) over tensors and Python numbers.
std::vector<int> binary(DecomposeCall& c, Prim prim, const char* a = "input",
                        const char* b = "other") {
  PrimArg x = c.operand(a), y = c.operand(b);
  if (!x.is_value() && !y.is_value()) x = number_as_tensor(c, x);
  return {c.b.binary(prim, x, y)};
}

// other * alpha, folded into a scalar operand.
PrimArg times_alpha(DecomposeCall& c, PrimArg other) {
  if (!c.has_param("alpha") || !c.given("alpha")) return other;
  PrimArg alpha = c.operand("alpha");
  if (alpha.is_value()) c.unsupported("alpha is a tensor");
  if (alpha.scalar.kind == ScalarKind::Int && alpha.scalar.integer == 1) return other;
  if (!other.is_value()) {
    if (other.scalar.kind == ScalarKind::Complex || alpha.scalar.kind == ScalarKind::Complex) {
      c.unsupported("complex alpha");
    }
    const bool integral = other.scalar.kind != ScalarKind::Float && alpha.scalar.kind != ScalarKind::Float;
    return integral ? PrimArg::of_scalar(Scalar::of_int(other.scalar.integer * alpha.scalar.integer))
                    : f(other.scalar.as_double() * alpha.scalar.as_double());
  }
  return v(c.b.binary(Prim::Mul, other, alpha));
}

int unary(DecomposeCall& c, Prim prim) { return c.b.unary(prim, c.tensor("input")); }

bool inplace(DecomposeCall& c) { return c.has_param("inplace") && c.flag("inplace"); }

}  // namespace

std::vector<int> decompose_Add(DecomposeCall& c) {
  PrimArg x = c.operand("input");
  PrimArg y = times_alpha(c, c.operand("other"));
  if (!x.is_value() && !y.is_value()) x = number_as_tensor(c, x);
  return {c.b.binary(Prim::Add, x, y)};
}

std::vector<int> decompose_Sub(DecomposeCall& c) {
  PrimArg x = c.operand("input");
  PrimArg y = times_alpha(c, c.operand("other"));
  if (!x.is_value() && !y.is_value()) x = number_as_tensor(c, x);
  return {c.b.binary(Prim::Sub, x, y)};
}

// rsub(input, other, alpha) = other - alpha * input.
std::vector<int> decompose_RSub(DecomposeCall& c) {
  PrimArg x = c.has_param("alpha") ? times_alpha(c, c.operand("input")) : c.operand("input");
  return {c.b.binary(Prim::Sub, c.operand("other"), x)};
}

std::vector<int> decompose_Mul(DecomposeCall& c) { return binary(c, Prim::Mul); }

std::vector<int> decompose_Div(DecomposeCall& c) {
  if (c.has_param("rounding_mode") && c.given("rounding_mode")) {
    const std::string mode = c.text("rounding_mode");
    if (mode == "floor") return binary(c, Prim::FloorDivide);
    if (mode == "trunc") return binary(c, Prim::TruncDivide);
    c.unsupported("rounding_mode " + mode);
  }
  // `2 / x` runs Tensor.__rtruediv__, which torch writes as x.reciprocal() * 2.
  if (!c.is_tensor("input") && !c.has_param("rounding_mode") && c.node.target_name == "operator.truediv") {
    return {c.b.binary(Prim::Mul, v(c.b.unary(Prim::Reciprocal, c.tensor("other"))), c.operand("input"))};
  }
  return binary(c, Prim::Div);
}

// torch.floor_divide's gradient is torch's to decide (1.13 raises "not
// implemented"; div(rounding_mode="floor") gives zeros): on a gradient path
// it stays a torch call, whose backward is torch's own.
std::vector<int> decompose_FloorDivide(DecomposeCall& c) {
  if (!c.node.metas.empty() && c.node.metas[0].requires_grad) c.unsupported("on a gradient path");
  return binary(c, Prim::FloorDivide);
}
std::vector<int> decompose_Remainder(DecomposeCall& c) { return binary(c, Prim::Remainder); }
std::vector<int> decompose_Fmod(DecomposeCall& c) { return binary(c, Prim::Fmod); }
std::vector<int> decompose_Pow(DecomposeCall& c) { return binary(c, Prim::Pow, "input", "exponent"); }
// torch.square(x) is at::pow(x, 2).
std::vector<int> decompose_Square(DecomposeCall& c) {
  return {c.b.binary(Prim::Pow, v(c.tensor("input")), PrimArg::of_scalar(Scalar::of_int(2)))};
}
std::vector<int> decompose_Maximum(DecomposeCall& c) { return binary(c, Prim::Maximum); }
std::vector<int> decompose_Minimum(DecomposeCall& c) { return binary(c, Prim::Minimum); }
std::vector<int> decompose_Atan2(DecomposeCall& c) { return binary(c, Prim::Atan2); }
std::vector<int> decompose_Eq(DecomposeCall& c) { return binary(c, Prim::Eq); }
std::vector<int> decompose_Ne(DecomposeCall& c) { return binary(c, Prim::Ne); }
std::vector<int> decompose_Lt(DecomposeCall& c) { return binary(c, Prim::Lt); }
std::vector<int> decompose_Le(DecomposeCall& c) { return binary(c, Prim::Le); }
std::vector<int> decompose_Gt(DecomposeCall& c) { return binary(c, Prim::Gt); }
std::vector<int> decompose_Ge(DecomposeCall& c) { return binary(c, Prim::Ge); }
std::vector<int> decompose_LogicalAnd(DecomposeCall& c) { return binary(c, Prim::LogicalAnd); }
std::vector<int> decompose_LogicalOr(DecomposeCall& c) { return binary(c, Prim::LogicalOr); }
std::vector<int> decompose_LogicalXor(DecomposeCall& c) { return binary(c, Prim::LogicalXor); }
std::vector<int> decompose_BitwiseAnd(DecomposeCall& c) { return binary(c, Prim::BitwiseAnd); }
std::vector<int> decompose_BitwiseOr(DecomposeCall& c) { return binary(c, Prim::BitwiseOr); }
std::vector<int> decompose_BitwiseXor(DecomposeCall& c) { return binary(c, Prim::BitwiseXor); }

std::vector<int> decompose_Where(DecomposeCall& c) {
  const int cond = c.tensor("condition");
  if (c.b.meta(cond).dtype != DType::Bool) c.unsupported("condition is not bool");
  return {c.b.where(cond, c.operand("input"), c.operand("other"))};
}

// masked_fill(x, mask, value) = where(mask, value, x) in x's dtype.
std::vector<int> decompose_MaskedFill(DecomposeCall& c) {
  const int x = c.tensor("input");
  const int mask = c.tensor("mask");
  if (c.b.meta(mask).dtype != DType::Bool) c.unsupported("mask is not bool");
  PrimArg value = c.operand("value");
  if (value.is_value()) value = PrimArg::of_value(to_dtype(c.b, value.value, c.b.meta(x).dtype));
  return {c.b.where(mask, value, v(x))};
}

namespace {

// tril / triu: x where the column minus the row is at most (tril) or at
// least (triu) `diagonal`, zero elsewhere, over an iota grid of the last
// two dims (causal masks; Longformer's window masks), so the kernels that
// read it compute it and its gradient is a where's.
std::vector<int> triangle(DecomposeCall& c, bool lower) {
  const int x = c.tensor("input");
  const graph::TensorMeta m = c.b.meta(x);
  const size_t rank = m.sizes.size();
  if (rank < 2) c.unsupported("fewer than 2 dims");
  if (is_complex(m.dtype)) c.unsupported("a complex input");
  const int64_t diagonal = c.integer("diagonal");
  const Placement at{m.device_type, m.device_index, false};
  const int rows = c.b.unsqueeze(c.b.iota(m.sizes[rank - 2], 0, 1, DType::Int64, at), 1);
  // column - diagonal, against the row: kept where <= (tril) or >= (triu).
  const int cols = c.b.iota(m.sizes[rank - 1], -diagonal, 1, DType::Int64, at);
  const int keep = c.b.binary(lower ? Prim::Le : Prim::Ge, v(cols), v(rows));
  const Scalar zero = m.dtype == DType::Bool ? Scalar::of_bool(false)
                      : is_floating(m.dtype) ? Scalar::of_float(0.0)
                                             : Scalar::of_int(0);
  return {c.b.where(keep, v(x), PrimArg::of_scalar(zero))};
}

}  // namespace

// clamp(x, min, max) = t > max ? max : t, t = x < min ? min : x. Written
// with where rather than maximum/minimum so that the gradient flows at the
// bounds (torch's clamp backward is inclusive; maximum splits ties), NaN
// propagates (comparisons with NaN are false), and max wins when min > max.
std::vector<int> decompose_Clamp(DecomposeCall& c) {
  int x = c.tensor("input");
  if (!c.given("min") && !c.given("max")) c.unsupported("neither min nor max");
  if (c.given("min")) {
    const PrimArg lo = c.operand("min");
    x = c.b.where(c.b.binary(Prim::Lt, v(x), lo), lo, v(x));
  }
  if (c.given("max")) {
    const PrimArg hi = c.operand("max");
    x = c.b.where(c.b.binary(Prim::Gt, v(x), hi), hi, v(x));
  }
  return {x};
}

#define KILN_UNARY_DECOMPOSITION(op) \
  std::vector<int> decompose_##op(DecomposeCall& c) { return {unary(c, Prim::op)}; }
KILN_UNARY_DECOMPOSITION(Neg)
KILN_UNARY_DECOMPOSITION(Abs)
KILN_UNARY_DECOMPOSITION(Exp)
KILN_UNARY_DECOMPOSITION(Exp2)
KILN_UNARY_DECOMPOSITION(Log)
KILN_UNARY_DECOMPOSITION(Log2)
KILN_UNARY_DECOMPOSITION(Log1p)
KILN_UNARY_DECOMPOSITION(Expm1)
KILN_UNARY_DECOMPOSITION(Sqrt)
KILN_UNARY_DECOMPOSITION(Rsqrt)
KILN_UNARY_DECOMPOSITION(Sin)
KILN_UNARY_DECOMPOSITION(Cos)
KILN_UNARY_DECOMPOSITION(Tan)
KILN_UNARY_DECOMPOSITION(Tanh)
KILN_UNARY_DECOMPOSITION(Sigmoid)
KILN_UNARY_DECOMPOSITION(Erf)
KILN_UNARY_DECOMPOSITION(Floor)
KILN_UNARY_DECOMPOSITION(Ceil)
KILN_UNARY_DECOMPOSITION(Round)
KILN_UNARY_DECOMPOSITION(Trunc)
KILN_UNARY_DECOMPOSITION(Sign)
KILN_UNARY_DECOMPOSITION(Reciprocal)
KILN_UNARY_DECOMPOSITION(LogicalNot)
KILN_UNARY_DECOMPOSITION(BitwiseNot)
KILN_UNARY_DECOMPOSITION(IsNan)
KILN_UNARY_DECOMPOSITION(IsInf)
#undef KILN_UNARY_DECOMPOSITION

// relu(x) = x <= 0 ? 0 : x: keeps NaN (the comparison is false) as torch's
// clamp_min does, and its gradient is 0 at x == 0 as torch's (maximum(x, 0)
// would split it in halves there).
std::vector<int> decompose_Relu(DecomposeCall& c) {
  if (inplace(c)) c.unsupported("inplace=True");
  const int x = c.tensor("input");
  const int off = c.b.binary(Prim::Le, v(x), PrimArg::of_scalar(Scalar::of_int(0)));
  return {c.b.where(off, PrimArg::of_scalar(Scalar::of_int(0)), v(x))};
}

std::vector<int> decompose_Silu(DecomposeCall& c) {
  if (inplace(c)) c.unsupported("inplace=True");
  const int x = c.tensor("input");
  return {c.b.binary(Prim::Mul, v(x), v(c.b.unary(Prim::Sigmoid, x)))};
}

// softplus(x) = log1p(exp(beta x)) / beta, and x itself where beta x >
// threshold (torch's linear region). The exponent is clamped to the
// threshold so the branch not taken never overflows: its gradient, masked
// by the where, would be 0 * inf otherwise.
std::vector<int> decompose_Softplus(DecomposeCall& c) {
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const double beta = c.number("beta"), threshold = c.number("threshold");
  if (beta == 0) c.unsupported("beta=0");
  const int scaled = beta == 1 ? x : b.binary(Prim::Mul, v(x), f(beta));
  const int bounded = b.binary(Prim::Minimum, v(scaled), f(threshold));
  int smooth = b.unary(Prim::Log1p, b.unary(Prim::Exp, bounded));
  if (beta != 1) smooth = b.binary(Prim::Div, v(smooth), f(beta));
  return {b.where(b.binary(Prim::Gt, v(scaled), f(threshold)), v(x), v(smooth))};
}

// hardsigmoid(x) = min(max(x + 3, 0), 6) / 6, written with wheres so that
// the gradient is torch's: 1/6 strictly inside (-3, 3), 0 elsewhere.
std::vector<int> decompose_Hardsigmoid(DecomposeCall& c) {
  if (inplace(c)) c.unsupported("inplace=True");
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const int ramp = b.binary(Prim::Div, v(b.binary(Prim::Add, v(x), f(3))), f(6));
  const int high = b.where(b.binary(Prim::Ge, v(x), f(3)), f(1), v(ramp));
  return {b.where(b.binary(Prim::Le, v(x), f(-3)), f(0), v(high))};
}

// hardswish(x) = x min(max(x + 3, 0), 6) / 6, with torch's gradient: 0 up
// to -3, x/3 + 1/2 strictly inside, 1 from 3 on.
std::vector<int> decompose_Hardswish(DecomposeCall& c) {
  if (inplace(c)) c.unsupported("inplace=True");
  PrimBuilder& b = c.b;
  const int x = c.tensor("input");
  const int middle = b.binary(Prim::Div, v(b.binary(Prim::Mul, v(x), v(b.binary(Prim::Add, v(x), f(3))))), f(6));
  const int high = b.where(b.binary(Prim::Ge, v(x), f(3)), v(x), v(middle));
  return {b.where(b.binary(Prim::Le, v(x), f(-3)), f(0), v(high))};
}

// gelu(x) = x/2 (1 + erf(x / sqrt 2)); the tanh form approximates erf.
std::vector<int> decompose_Gelu(DecomposeCall& c) {
  const std::string approximate = c.text("approximate");
  const int input = c.tensor("input");
  const DType dtype = c.b.meta(input).dtype;
  if (!is_floating(dtype)) c.unsupported("gelu of a non-floating tensor");
  PrimBuilder& b = c.b;
  const int x = to_dtype(b, input, opmath_dtype(dtype));
  int inner;
  if (approximate == "none") {
    inner = b.unary(Prim::Erf, b.binary(Prim::Mul, v(x), f(M_SQRT1_2)));
  } else if (approximate == "tanh") {
    const int cube = b.binary(Prim::Mul, v(b.binary(Prim::Mul, v(x), v(x))), v(x));
    const int sum = b.binary(Prim::Add, v(x), v(b.binary(Prim::Mul, v(cube), f(0.044715))));
    inner = b.unary(Prim::Tanh, b.binary(Prim::Mul, v(sum), f(M_SQRT2 * M_2_SQRTPI * 0.5)));
  } else {
    c.unsupported("approximate='" + approximate + "'");
  }
  const int half_x = b.binary(Prim::Mul, v(x), f(0.5));
  const int out = b.binary(Prim::Mul, v(half_x), v(b.binary(Prim::Add, v(inner), f(1))));
  return {to_dtype(b, out, dtype)};
}

std::vector<int> decompose_Tril(DecomposeCall& c) { return triangle(c, true); }
std::vector<int> decompose_Triu(DecomposeCall& c) { return triangle(c, false); }

}  // namespace kiln::prims
