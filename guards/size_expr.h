// A size as a function of one size symbol, c * s^k + d, fitted from the
// values a dynamic trace saw at its sample points; what a guard on a size
// relation evaluates (Note [Size relations] in size_expr.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::guards {

struct SizeExpr {
  int symbol = -1;  // -1: the constant `constant`
  int power = 0;    // 1 or 2 with a symbol
  int64_t coeff = 0;
  int64_t constant = 0;

  // The value with `symbols` bound (a guard set's per-call array).
  int64_t eval(const int64_t* symbols) const;
  // "2*s0+1", "s1**2", "64".
  std::string text() const;
  bool operator==(const SizeExpr&) const = default;
};

// Fits `per_point` (a value at each sample point, where every symbol of
// base size symbol_sizes[i] is scaled by 1, 2, 3) as a constant, an affine
// function of one symbol or c * s^2, trying only the symbols marked in
// `candidates` (all where it is empty: the symbols the value derives
// from, where known). Nothing when no fit, or when two symbols fit (which
// one the value follows is unknown).
std::optional<SizeExpr> fit_size_expr(const std::vector<int64_t>& per_point,
                                      const std::vector<int64_t>& symbol_sizes,
                                      const std::vector<bool>& candidates = {});

// Python's rich comparison `cmp` (Py_LT .. Py_GE) of two ints.
bool compare_sizes(int cmp, int64_t a, int64_t b);

// "<", "<=", "==", "!=", ">", ">=".
const char* comparison_text(int cmp);

}  // namespace kiln::guards
