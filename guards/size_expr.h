// A size as a function of the size symbols: a linear combination
// sum(c_i * s_i) + d, or c * s^2, built exactly from where a size came
// from or fitted from the values a dynamic trace saw at its sample points;
// what a guard on a size relation evaluates (Note [Size relations] in
// size_expr.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::guards {

struct SizeExpr {
  int64_t constant = 0;
  // (symbol, coefficient), by symbol, no zero coefficients.
  std::vector<std::pair<int, int64_t>> terms;
  // With one term: coefficient * s^2 (+ constant) instead.
  bool square = false;

  static SizeExpr of_constant(int64_t value);
  static SizeExpr of_symbol(int symbol);
  bool is_constant() const { return terms.empty(); }
  // The value with `symbols` bound (a guard set's per-call array).
  int64_t eval(const int64_t* symbols) const;
  // The highest symbol used, or -1.
  int max_symbol() const;
  // "s1-s0+1", "2*s0", "s1**2", "64".
  std::string text() const;
  bool operator==(const SizeExpr&) const = default;
};

// a + b, a - b, a * b (one of them constant), -a: exact where the result is
// linear (or a constant times a square), nothing otherwise.
std::optional<SizeExpr> add_sizes(const SizeExpr& a, const SizeExpr& b);
std::optional<SizeExpr> subtract_sizes(const SizeExpr& a, const SizeExpr& b);
std::optional<SizeExpr> multiply_sizes(const SizeExpr& a, const SizeExpr& b);
// a / divisor where every coefficient and the constant divide exactly (a
// view's -1 dim: the numel over the other dims); nothing otherwise.
std::optional<SizeExpr> divide_sizes_exactly(const SizeExpr& a, int64_t divisor);

// Fits `per_point` (a value at each sample point, where every symbol of
// base size symbol_sizes[i] is scaled by 1, 2, 3, or, with a nonzero
// `offset`, shifted by 0, offset, 2*offset) as a constant, an affine
// function of one symbol or c * s^2, trying only the symbols marked in
// `candidates` (all where it is empty: the symbols the value derives
// from, where known). Nothing when no fit, or when two symbols fit (which
// one the value follows is unknown).
std::optional<SizeExpr> fit_size_expr(const std::vector<int64_t>& per_point,
                                      const std::vector<int64_t>& symbol_sizes,
                                      const std::vector<bool>& candidates = {}, int64_t offset = 0);

// Python's rich comparison `cmp` (Py_LT .. Py_GE) of two ints.
bool compare_sizes(int cmp, int64_t a, int64_t b);

// "<", "<=", "==", "!=", ">", ">=".
const char* comparison_text(int cmp);

}  // namespace kiln::guards
