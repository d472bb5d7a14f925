// Tests of guards/size_expr.h: fitting a size from its values at the
// dynamic trace's sample points (every symbol scaled by 1, 2, 3), evaluating
// it at bound symbols, and its text (Note [Size relations]).
#include <Python.h>
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "guards/size_expr.h"

namespace kiln::guards {
namespace {

TEST(SizeExpr, FitsConstantsAffineSizesAndSquares) {
  const std::vector<int64_t> symbols = {12};  // s0 traced as 12
  std::optional<SizeExpr> constant = fit_size_expr({7, 7, 7}, symbols);
  ASSERT_TRUE(constant);
  EXPECT_TRUE(constant->is_constant());
  EXPECT_EQ(constant->text(), "7");

  std::optional<SizeExpr> affine = fit_size_expr({25, 49, 73}, symbols);  // 2*s0+1
  ASSERT_TRUE(affine);
  EXPECT_EQ(affine->text(), "2*s0+1");
  const int64_t bound[] = {5};
  EXPECT_EQ(affine->eval(bound), 11);

  std::optional<SizeExpr> square = fit_size_expr({144, 576, 1296}, symbols);  // s0**2
  ASSERT_TRUE(square);
  EXPECT_EQ(square->text(), "s0**2");
  EXPECT_EQ(square->eval(bound), 25);
}

TEST(SizeExpr, RefusesWhatNoSymbolExplains) {
  // 12 // 2: steps of 6 are no whole multiple of s0.
  EXPECT_FALSE(fit_size_expr({6, 12, 18}, {12}));
  // Uneven steps that are no square either.
  EXPECT_FALSE(fit_size_expr({3, 5, 10}, {12}));
}

TEST(SizeExpr, RefusesAValueTwoSymbolsExplain) {
  // s0 = 4 and s1 = 8: 8, 16, 24 is 2*s0 or s1.
  EXPECT_FALSE(fit_size_expr({8, 16, 24}, {4, 8}));
  // Restricted to the symbol the value derives from, it fits.
  std::optional<SizeExpr> only_s1 = fit_size_expr({8, 16, 24}, {4, 8}, {false, true});
  ASSERT_TRUE(only_s1);
  EXPECT_EQ(only_s1->text(), "s1");
}

TEST(SizeExpr, FitsValuesAtShiftedPoints) {
  // Points shifted by 16 (Note [Shifted sample points]): s0 = 17 is 17, 33,
  // 49; s1 = 16 is 16, 32, 48.
  std::optional<SizeExpr> affine = fit_size_expr({35, 67, 99}, {17, 16}, {true, false}, 16);  // 2*s0+1
  ASSERT_TRUE(affine);
  EXPECT_EQ(affine->text(), "2*s0+1");
  std::optional<SizeExpr> square = fit_size_expr({256, 1024, 2304}, {17, 16}, {false, true}, 16);  // s1**2
  ASSERT_TRUE(square);
  EXPECT_EQ(square->text(), "s1**2");
  // Every symbol gains the same at shifted points: two candidates are refused.
  EXPECT_FALSE(fit_size_expr({17, 33, 49}, {17, 16}, {}, 16));
}

TEST(SizeExpr, ComposesLinearSizesExactly) {
  // kv_length + kv_offset - mask.shape[-1] with kv_length = s1 + 1.
  const SizeExpr kv = *add_sizes(SizeExpr::of_symbol(1), SizeExpr::of_constant(1));
  const std::optional<SizeExpr> padding = subtract_sizes(kv, SizeExpr::of_symbol(0));
  ASSERT_TRUE(padding);
  EXPECT_EQ(padding->text(), "-s0+s1+1");
  const int64_t bound[] = {18, 17};
  EXPECT_EQ(padding->eval(bound), 0);
  // s0 - s0 cancels to a constant; s0 * s0 is a square; s0 * s1 is neither.
  EXPECT_TRUE(subtract_sizes(SizeExpr::of_symbol(0), SizeExpr::of_symbol(0))->is_constant());
  EXPECT_EQ(multiply_sizes(SizeExpr::of_symbol(0), SizeExpr::of_symbol(0))->text(), "s0**2");
  EXPECT_FALSE(multiply_sizes(SizeExpr::of_symbol(0), SizeExpr::of_symbol(1)));
  EXPECT_EQ(multiply_sizes(SizeExpr::of_symbol(1), SizeExpr::of_constant(64))->text(), "64*s1");
}

TEST(SizeExpr, DividesOnlyExactly) {
  // A view's -1 dim: numel 4*s0+8 over 4 is s0+2; over 8 it is not exact.
  const SizeExpr numel = *add_sizes(*multiply_sizes(SizeExpr::of_symbol(0), SizeExpr::of_constant(4)),
                                    SizeExpr::of_constant(8));
  EXPECT_EQ(divide_sizes_exactly(numel, 4)->text(), "s0+2");
  EXPECT_FALSE(divide_sizes_exactly(numel, 8));
  EXPECT_FALSE(divide_sizes_exactly(numel, 0));
  EXPECT_EQ(divide_sizes_exactly(*multiply_sizes(SizeExpr::of_symbol(1), SizeExpr::of_symbol(1)), 1)->text(), "s1**2");
}

TEST(SizeExpr, ComparesAsPython) {
  EXPECT_TRUE(compare_sizes(Py_GT, 5, 4));
  EXPECT_FALSE(compare_sizes(Py_LE, 5, 4));
  EXPECT_TRUE(compare_sizes(Py_NE, 5, 4));
  EXPECT_STREQ(comparison_text(Py_GE), ">=");
}

}  // namespace
}  // namespace kiln::guards
