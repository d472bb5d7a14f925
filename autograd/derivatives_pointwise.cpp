// Derivative rules of the elementwise prims and the copies.
#include <cmath>

#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"
#include "prims/common_meta.h"

namespace kiln::autograd {

using prims::Prim;

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

// Note [Division after the sum]
// The gradient of c in y = a / c is sum_to(-g * y / c): summed down to c's
// sizes when c was broadcast. Softmax decomposes to e / sum(e), so its
// backward divided every element by the row sum a second time, and IEEE
// division is what bounded that kernel on the GPU (softmax backward was
// instruction-bound). Since c is one value along the summed dims,
// -sum_to(g * y) / c is the same quantity with one division per element of
// c. It rounds differently (a sum, then one division) from eager's
// -g * a / (c * c) per element, as the per-element form did too; both
// stay within the tests' tolerances against eager. Only same-dtype c
// takes the short form, so the division never runs in a narrower type.

// The gradient of unary y = f(x), given g = dL/dy.
int unary_vjp(prims::PrimBuilder& b, Prim prim, int x, int y, int g) {
  auto mul = [&](int a, prims::PrimArg c) { return b.binary(Prim::Mul, v(a), c); };
  auto div = [&](int a, prims::PrimArg c) { return b.binary(Prim::Div, v(a), c); };
  switch (prim) {
    case Prim::Abs: return mul(g, v(b.unary(Prim::Sign, x)));
    case Prim::Neg: return b.unary(Prim::Neg, g);
    case Prim::Exp: return mul(g, v(y));
    case Prim::Exp2: return mul(mul(g, v(y)), f(kLn2));
    case Prim::Log: return div(g, v(x));
    case Prim::Log2: return div(g, v(b.binary(Prim::Mul, v(x), f(kLn2))));
    case Prim::Log1p: return div(g, v(b.binary(Prim::Add, v(x), f(1))));
    case Prim::Expm1: return mul(g, v(b.binary(Prim::Add, v(y), f(1))));
    case Prim::Sqrt: return div(g, v(b.binary(Prim::Mul, v(y), f(2))));
    case Prim::Rsqrt: {
      // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
      const int y3 = b.binary(Prim::Pow, v(y), f(3));
      return mul(mul(g, v(y3)), f(-0.5));
    }
    case Prim::Sin: return mul(g, v(b.unary(Prim::Cos, x)));
    case Prim::Cos: return b.unary(Prim::Neg, mul(g, v(b.unary(Prim::Sin, x))));
    case Prim::Tan: {
      const int y2 = b.binary(Prim::Mul, v(y), v(y));
      return mul(g, v(b.binary(Prim::Add, v(y2), f(1))));
    }
    case Prim::Tanh: {
      // 1 - y^2, written as (1 - y) (1 + y) would round differently than torch.
      const int y2 = b.binary(Prim::Mul, v(y), v(y));
      return mul(g, v(b.binary(Prim::Sub, f(1), v(y2))));
    }
    case Prim::Sigmoid: {
      const int one_minus = b.binary(Prim::Sub, f(1), v(y));
      return mul(g, v(b.binary(Prim::Mul, v(one_minus), v(y))));
    }
    case Prim::Erf: {
      const int x2 = b.binary(Prim::Mul, v(x), v(x));
      const int e = b.unary(Prim::Exp, b.unary(Prim::Neg, x2));
      return mul(g, v(b.binary(Prim::Mul, v(e), f(kTwoOverSqrtPi))));
    }
    case Prim::Reciprocal: {
      const int y2 = b.binary(Prim::Mul, v(y), v(y));
      return b.unary(Prim::Neg, mul(g, v(y2)));
    }
    case Prim::Floor:
    case Prim::Ceil:
    case Prim::Round:
    case Prim::Trunc:
    case Prim::Sign:
      // Piecewise constant: torch returns zeros, not None.
      return zeros_like(b, b.meta(x));
    default:
      throw NoDerivative(std::string(prims::prim_name(prim)) + " has no derivative rule");
  }
}

// A scalar operand minus one, keeping its kind (x ** 2 stays x ** 1, an
// integer exponent).
prims::PrimArg scalar_minus_one(const prims::Scalar& s) {
  if (s.kind == prims::ScalarKind::Int || s.kind == prims::ScalarKind::Bool) {
    return prims::PrimArg::of_scalar(prims::Scalar::of_int(s.integer - 1));
  }
  return f(s.as_double() - 1);
}

// d(a^c)/da = c a^(c-1), and zero where c == 0 (as torch: 0^0 is flat, where
// the formula would give 0 * inf).
int pow_base_grad(prims::PrimBuilder& b, int g, prims::PrimArg a, prims::PrimArg c) {
  if (!c.is_value()) {
    if (c.scalar.as_double() == 0) return zeros_like(b, b.meta(g));
    const int p = b.binary(Prim::Pow, a, scalar_minus_one(c.scalar));
    return b.binary(Prim::Mul, v(g), v(b.binary(Prim::Mul, c, v(p))));
  }
  const int p = b.binary(Prim::Pow, a, v(b.binary(Prim::Sub, c, f(1))));
  const int term = b.binary(Prim::Mul, v(g), v(b.binary(Prim::Mul, c, v(p))));
  return b.where(b.binary(Prim::Eq, c, f(0)), f(0), v(term));
}

// d(a^c)/dc = a^c log(a), and zero where a == 0 and c >= 0 (0^c is flat
// there, as torch has it).
int pow_exponent_grad(prims::PrimBuilder& b, int g, prims::PrimArg a, prims::PrimArg c, int y) {
  const int gy = b.binary(Prim::Mul, v(g), v(y));
  if (!a.is_value()) {
    // A constant base: log(a) folded. log of a negative base is NaN in torch.
    const double base = a.scalar.as_double();
    if (base < 0) throw NoDerivative("pow: gradient of the exponent for a negative base");
    if (base > 0) return b.binary(Prim::Mul, v(gy), f(std::log(base)));
    return b.where(b.binary(Prim::Ge, c, f(0)), f(0), v(b.binary(Prim::Mul, v(gy), f(-INFINITY))));
  }
  const int term = b.binary(Prim::Mul, v(gy), v(b.unary(Prim::Log, a.value)));
  const int flat = b.binary(Prim::LogicalAnd, v(b.binary(Prim::Eq, a, f(0))), v(b.binary(Prim::Ge, c, f(0))));
  return b.where(flat, f(0), v(term));
}

}  // namespace

std::vector<int> vjp_pointwise(prims::PrimBuilder& b, const NodeView& view,
                               const std::vector<int>& grads, const std::vector<bool>& needs) {
  const Prim prim = view.node.prim;
  const int g = grads[0];
  const int y = view.outputs[0];
  const std::vector<int>& in = view.inputs;
  std::vector<int> out(in.size(), -1);
  auto want = [&](size_t i) { return i < in.size() && in[i] >= 0 && needs[i]; };
  // Operands: values, or scalar constants (which never need gradients).
  auto arg = [&](size_t i) { return view.node.args[i].is_value() ? v(in[i]) : view.node.args[i]; };
  auto to_input = [&](size_t i, int grad) { return sum_to(b, grad, b.meta(in[i])); };
  switch (prims::prim_info(prim).family) {
    case prims::Family::Unary:
      if (want(0)) out[0] = cast_to(b, unary_vjp(b, prim, in[0], y, g), b.meta(in[0]).dtype);
      return out;
    case prims::Family::Convert:
      if (want(0)) out[0] = cast_to(b, g, b.meta(in[0]).dtype);
      return out;
    case prims::Family::Ternary: {
      // where(cond, a, b): the gradient flows to the side cond picked.
      const int cond = in[0];
      if (want(1)) out[1] = to_input(1, b.where(cond, v(g), f(0)));
      if (want(2)) out[2] = to_input(2, b.where(cond, f(0), v(g)));
      return out;
    }
    case prims::Family::Binary:
      break;
    default:
      throw NoDerivative(std::string(prims::prim_name(prim)) + " is not elementwise");
  }
  const prims::PrimArg a = arg(0);
  const prims::PrimArg c = arg(1);
  auto mul = [&](prims::PrimArg p, prims::PrimArg q) { return b.binary(Prim::Mul, p, q); };
  auto div = [&](prims::PrimArg p, prims::PrimArg q) { return b.binary(Prim::Div, p, q); };
  switch (prim) {
    case Prim::Add:
      if (want(0)) out[0] = to_input(0, g);
      if (want(1)) out[1] = to_input(1, g);
      return out;
    case Prim::Sub:
      if (want(0)) out[0] = to_input(0, g);
      if (want(1)) out[1] = to_input(1, b.unary(Prim::Neg, g));
      return out;
    case Prim::Mul:
      if (want(0)) out[0] = to_input(0, mul(v(g), c));
      if (want(1)) out[1] = to_input(1, mul(v(g), a));
      return out;
    case Prim::Div:
      if (want(0)) out[0] = to_input(0, div(v(g), c));
      // d(a/c)/dc = -a/c^2 = -y/c. A broadcast c (softmax's row sum) is one
      // value along the dims summed away, so the division moves out of the
      // sum: one per element of c, not per element of y (Note [Division
      // after the sum]).
      if (want(1)) {
        const graph::TensorMeta cm = b.meta(in[1]);
        if (prims::numel(cm.sizes) < prims::numel(b.meta(y).sizes) && cm.dtype == b.meta(y).dtype) {
          out[1] = b.unary(Prim::Neg, div(v(to_input(1, mul(v(g), v(y)))), c));
        } else {
          out[1] = to_input(1, b.unary(Prim::Neg, div(v(mul(v(g), v(y))), c)));
        }
      }
      return out;
    case Prim::Pow: {
      if (want(0)) out[0] = to_input(0, pow_base_grad(b, g, a, c));
      if (want(1)) out[1] = to_input(1, pow_exponent_grad(b, g, a, c, y));
      return out;
    }
    case Prim::Maximum:
    case Prim::Minimum: {
      // Ties split the gradient in halves; the side that lost gets zero. As
      // torch, a NaN (no tie, no loser) passes the gradient to both sides.
      const Prim loses = prim == Prim::Maximum ? Prim::Lt : Prim::Gt;
      const int shared = b.where(b.binary(Prim::Eq, a, c), v(div(v(g), f(2))), v(g));
      if (want(0)) out[0] = to_input(0, b.where(b.binary(loses, a, c), f(0), v(shared)));
      if (want(1)) out[1] = to_input(1, b.where(b.binary(loses, c, a), f(0), v(shared)));
      return out;
    }
    case Prim::Atan2: {
      // d atan2(a, c) = (c da - a dc) / (a^2 + c^2); a scalar's square
      // folded. At (0, 0) both are 0, as torch's (its reciprocal of the
      // denominator is masked to 0 there), not 0/0.
      auto square = [&](prims::PrimArg p) { return p.is_value() ? v(mul(p, p)) : f(p.scalar.as_double() * p.scalar.as_double()); };
      const int denom = b.binary(Prim::Add, square(a), square(c));
      const int recip = b.where(b.binary(Prim::Eq, v(denom), f(0)), f(0), v(div(f(1), v(denom))));
      if (want(0)) out[0] = to_input(0, mul(v(mul(v(g), c)), v(recip)));
      if (want(1)) out[1] = to_input(1, b.unary(Prim::Neg, mul(v(mul(v(g), a)), v(recip))));
      return out;
    }
    case Prim::Fmod:
    case Prim::Remainder: {
      // a - q c with q = a / c rounded (toward zero for fmod, down for
      // remainder), q being piecewise constant.
      if (want(0)) out[0] = to_input(0, g);
      if (want(1)) {
        const int q = b.binary(prim == Prim::Fmod ? Prim::TruncDivide : Prim::FloorDivide, a, c);
        out[1] = to_input(1, b.unary(Prim::Neg, mul(v(g), v(q))));
      }
      return out;
    }
    case Prim::FloorDivide:
    case Prim::TruncDivide:
      if (want(0)) out[0] = zeros_like(b, b.meta(in[0]));
      if (want(1)) out[1] = zeros_like(b, b.meta(in[1]));
      return out;
    default:
      throw NoDerivative(std::string(prims::prim_name(prim)) + " has no derivative rule");
  }
}

}  // namespace kiln::autograd
