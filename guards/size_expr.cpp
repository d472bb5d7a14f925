#include "guards/size_expr.h"

#include <Python.h>

namespace kiln::guards {

// Note [Size relations]
// A dynamic trace (Note [Dynamic shapes] in tracer/) that compares sizes
// (`if seq_len > 1`, `past + seq <= max_positions`) takes the branch the
// comparison gives; the graph then holds only for sizes where it gives the
// same answer. Where the answer agrees at every sample point and both
// sides fit a SizeExpr of the symbols, the tracer keeps the answer and
// the guard set gets a SizeRelation guard: the comparison evaluated, on
// every call, at the sizes the call's tensors bind. A call where it
// differs misses the entry (and the next trace takes the other branch);
// comparisons that differ between points, or that no expression fits,
// still specialize the frame. The fit uses the sample points' values: a
// constant, d + c*s (the values step evenly), or c*s^2 (1 : 4 : 9). As
// every symbol scales alike at the points, symbols of proportional sizes
// explain a value alike: the fit tries only the symbols the value derives
// from (the symbolic dims its Tensor.size calls read), and a value two
// of them explain is not fitted.

int64_t SizeExpr::eval(const int64_t* symbols) const {
  if (symbol < 0) return constant;
  int64_t s = symbols[symbol];
  int64_t term = coeff * s;
  if (power == 2) term *= s;
  return term + constant;
}

std::string SizeExpr::text() const {
  if (symbol < 0) return std::to_string(constant);
  std::string out = coeff == 1 ? "" : std::to_string(coeff) + "*";
  out += "s" + std::to_string(symbol);
  if (power == 2) out += "**2";
  if (constant > 0) out += "+" + std::to_string(constant);
  if (constant < 0) out += std::to_string(constant);
  return out;
}

std::optional<SizeExpr> fit_size_expr(const std::vector<int64_t>& per_point,
                                      const std::vector<int64_t>& symbol_sizes,
                                      const std::vector<bool>& candidates) {
  if (per_point.size() != 3) return std::nullopt;
  const int64_t v0 = per_point[0], v1 = per_point[1], v2 = per_point[2];
  if (v0 == v1 && v1 == v2) return SizeExpr{-1, 0, 0, v0};
  std::optional<SizeExpr> found;
  for (size_t i = 0; i < symbol_sizes.size(); ++i) {
    const int64_t base = symbol_sizes[i];
    if (base <= 0 || (!candidates.empty() && (i >= candidates.size() || !candidates[i]))) continue;
    std::optional<SizeExpr> fit;
    const int64_t step = v1 - v0;
    if (step == v2 - v1 && step % base == 0) {
      fit = SizeExpr{static_cast<int>(i), 1, step / base, v0 - step};
    } else if (v1 == 4 * v0 && v2 == 9 * v0 && v0 % (base * base) == 0) {
      fit = SizeExpr{static_cast<int>(i), 2, v0 / (base * base), 0};
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
