// Derivative rules of the elementwise prims and the copies.
#include <cmath>

#include "autograd/derivatives_family.h"
#include "autograd/grad_helpers.h"

namespace kiln::autograd {

using prims::Prim;

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

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
      // d(a/c)/dc = -a/c^2 = -y/c
      if (want(1)) out[1] = to_input(1, b.unary(Prim::Neg, div(v(mul(v(g), v(y))), c)));
      return out;
    case Prim::Pow: {
      if (want(0)) {
        // c * a^(c-1)
        const int c_minus_1 = b.binary(Prim::Sub, c, f(1));
        const int p = b.binary(Prim::Pow, a, v(c_minus_1));
        out[0] = to_input(0, mul(v(mul(v(g), c)), v(p)));
      }
      if (want(1)) {
        const int gy = mul(v(g), v(y));
        if (!a.is_value()) {
          // A constant base: y log(a) with log(a) folded.
          const double base = a.scalar.as_double();
          if (!(base > 0)) throw NoDerivative("pow: gradient of the exponent for a base <= 0");
          out[1] = to_input(1, mul(v(gy), f(std::log(base))));
        } else {
          // y log(a), zero where a == 0 and c >= 0 (as torch: 0^c is flat there).
          const int term = mul(v(gy), v(b.unary(Prim::Log, in[0])));
          const int flat = b.binary(Prim::LogicalAnd, v(b.binary(Prim::Eq, a, f(0))), v(b.binary(Prim::Ge, c, f(0))));
          out[1] = to_input(1, b.where(flat, f(0), v(term)));
        }
      }
      return out;
    }
    case Prim::Maximum:
    case Prim::Minimum: {
      // Ties split the gradient in halves, as torch does.
      const Prim wins = prim == Prim::Maximum ? Prim::Gt : Prim::Lt;
      const int tie = b.binary(Prim::Eq, a, c);
      const int half = div(v(g), f(2));
      if (want(0)) {
        const int picked = b.where(b.binary(wins, a, c), v(g), f(0));
        out[0] = to_input(0, b.where(tie, v(half), v(picked)));
      }
      if (want(1)) {
        const int picked = b.where(b.binary(wins, c, a), v(g), f(0));
        out[1] = to_input(1, b.where(tie, v(half), v(picked)));
      }
      return out;
    }
    case Prim::Atan2: {
      const int denom = b.binary(Prim::Add, v(mul(a, a)), v(mul(c, c)));
      if (want(0)) out[0] = to_input(0, div(v(mul(v(g), c)), v(denom)));
      if (want(1)) out[1] = to_input(1, b.unary(Prim::Neg, div(v(mul(v(g), a)), v(denom))));
      return out;
    }
    case Prim::Fmod:
    case Prim::Remainder: {
      if (want(0)) out[0] = to_input(0, g);
      if (want(1)) {
        const Prim round = prim == Prim::Fmod ? Prim::Trunc : Prim::Floor;
        const int q = b.unary(round, div(a, c));
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
