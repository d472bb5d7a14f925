#include "guards/size_expr.h"

#include <Python.h>

#include <algorithm>
#include <map>

namespace kiln::guards {

// Note [Size relations]
// A dynamic trace (Note [Dynamic shapes] in tracer/) that compares sizes
// (`if seq_len > 1`, `past + seq <= max_positions`) takes the branch the
// comparison gives; the graph then holds only for sizes where it gives the
// same answer. Where the answer agrees at every sample point and both
// sides have a SizeExpr, the tracer keeps the answer and the guard set
// gets a SizeRelation guard: the comparison evaluated, on every call, at
// the sizes the call's tensors bind. A call where it differs misses the
// entry (and the next trace takes the other branch); comparisons that
// differ between points, or whose sides have no expression, still
// specialize the frame.
//
// A size's expression is exact where the tracer knows where it came from:
// x.size(d) of an input dim that is symbol s_k is s_k, and +, - and * by a
// constant compose exactly (kv_length + kv_offset - mask.shape[-1] is
// s1 + 1 - s0). Otherwise it is fitted from the sample points' values: a
// constant, d + c*s (the values step evenly) or c*s^2 (1 : 4 : 9). As
// every symbol scales alike at the points, symbols of proportional sizes
// explain a value alike: the fit tries only the symbols the value derives
// from (the symbolic dims its Tensor.size calls read), and a value two of
// them explain is not fitted.

SizeExpr SizeExpr::of_constant(int64_t value) { return SizeExpr{value, {}, false}; }

SizeExpr SizeExpr::of_symbol(int symbol) { return SizeExpr{0, {{symbol, 1}}, false}; }

int64_t SizeExpr::eval(const int64_t* symbols) const {
  int64_t value = constant;
  for (const auto& [symbol, coeff] : terms) {
    const int64_t s = symbols[symbol];
    value += square ? coeff * s * s : coeff * s;
  }
  return value;
}

int SizeExpr::max_symbol() const {
  int highest = -1;
  for (const auto& term : terms) highest = std::max(highest, term.first);
  return highest;
}

std::string SizeExpr::text() const {
  std::string out;
  for (const auto& [symbol, coeff] : terms) {
    if (coeff < 0) out += "-";
    else if (!out.empty()) out += "+";
    const int64_t magnitude = coeff < 0 ? -coeff : coeff;
    if (magnitude != 1) out += std::to_string(magnitude) + "*";
    out += "s" + std::to_string(symbol);
    if (square) out += "**2";
  }
  if (out.empty()) return std::to_string(constant);
  if (constant > 0) out += "+" + std::to_string(constant);
  if (constant < 0) out += std::to_string(constant);
  return out;
}

namespace {

// The linear combination a + factor * b (neither a square).
SizeExpr combine(const SizeExpr& a, const SizeExpr& b, int64_t factor) {
  std::map<int, int64_t> coeffs;
  for (const auto& [symbol, coeff] : a.terms) coeffs[symbol] += coeff;
  for (const auto& [symbol, coeff] : b.terms) coeffs[symbol] += factor * coeff;
  SizeExpr out = SizeExpr::of_constant(a.constant + factor * b.constant);
  for (const auto& [symbol, coeff] : coeffs) {
    if (coeff != 0) out.terms.emplace_back(symbol, coeff);
  }
  return out;
}

}  // namespace

std::optional<SizeExpr> add_sizes(const SizeExpr& a, const SizeExpr& b) {
  if (a.square || b.square) {
    // A square plus a constant stays one.
    if (b.is_constant()) return SizeExpr{a.constant + b.constant, a.terms, a.square};
    if (a.is_constant()) return SizeExpr{a.constant + b.constant, b.terms, b.square};
    return std::nullopt;
  }
  return combine(a, b, 1);
}

std::optional<SizeExpr> subtract_sizes(const SizeExpr& a, const SizeExpr& b) {
  std::optional<SizeExpr> minus_b = multiply_sizes(b, SizeExpr::of_constant(-1));
  if (!minus_b) return std::nullopt;
  return add_sizes(a, *minus_b);
}

std::optional<SizeExpr> multiply_sizes(const SizeExpr& a, const SizeExpr& b) {
  if (!a.is_constant() && !b.is_constant()) {
    // s * s: a square.
    if (!a.square && !b.square && a.constant == 0 && b.constant == 0 && a.terms.size() == 1 &&
        b.terms.size() == 1 && a.terms[0].first == b.terms[0].first) {
      return SizeExpr{0, {{a.terms[0].first, a.terms[0].second * b.terms[0].second}}, true};
    }
    return std::nullopt;
  }
  const SizeExpr& c = a.is_constant() ? a : b;
  const SizeExpr& e = a.is_constant() ? b : a;
  if (c.constant == 0) return SizeExpr::of_constant(0);
  SizeExpr out{e.constant * c.constant, {}, e.square};
  for (const auto& [symbol, coeff] : e.terms) out.terms.emplace_back(symbol, coeff * c.constant);
  return out;
}

std::optional<SizeExpr> divide_sizes_exactly(const SizeExpr& a, int64_t divisor) {
  if (divisor == 0 || a.constant % divisor != 0) return std::nullopt;
  SizeExpr out{a.constant / divisor, {}, a.square};
  for (const auto& [symbol, coeff] : a.terms) {
    if (coeff % divisor != 0) return std::nullopt;
    out.terms.emplace_back(symbol, coeff / divisor);
  }
  return out;
}

std::optional<SizeExpr> fit_size_expr(const std::vector<int64_t>& per_point,
                                      const std::vector<int64_t>& symbol_sizes,
                                      const std::vector<bool>& candidates, int64_t offset) {
  if (per_point.size() != 3) return std::nullopt;
  const int64_t v0 = per_point[0], v1 = per_point[1], v2 = per_point[2];
  if (v0 == v1 && v1 == v2) return SizeExpr::of_constant(v0);
  std::optional<SizeExpr> found;
  for (size_t i = 0; i < symbol_sizes.size(); ++i) {
    const int64_t base = symbol_sizes[i];
    if (base <= 0 || (!candidates.empty() && (i >= candidates.size() || !candidates[i]))) continue;
    std::optional<SizeExpr> fit;
    const int64_t step = v1 - v0;
    const int symbol = static_cast<int>(i);
    const int64_t gain = offset ? offset : base;  // what the symbol gains per point
    const int64_t x1 = base + gain, x2 = base + 2 * gain;
    if (step == v2 - v1 && step % gain == 0) {
      const int64_t coeff = step / gain;
      fit = SizeExpr{v0 - coeff * base, {{symbol, coeff}}, false};
    } else if (v0 % (base * base) == 0 && v1 == v0 / (base * base) * x1 * x1 &&
               v2 == v0 / (base * base) * x2 * x2) {
      fit = SizeExpr{0, {{symbol, v0 / (base * base)}}, true};
    }
    if (!fit) continue;
    // Two symbols explain the values: which one the size follows is unknown.
    if (found) return std::nullopt;
    found = fit;
  }
  return found;
}

bool compare_sizes(int cmp, int64_t a, int64_t b) {
  switch (cmp) {
    case Py_LT: return a < b;
    case Py_LE: return a <= b;
    case Py_EQ: return a == b;
    case Py_NE: return a != b;
    case Py_GT: return a > b;
    default: return a >= b;
  }
}

const char* comparison_text(int cmp) {
  static const char* const kTexts[] = {"<", "<=", "==", "!=", ">", ">="};
  return cmp >= 0 && cmp < 6 ? kTexts[cmp] : "?";
}

}  // namespace kiln::guards
