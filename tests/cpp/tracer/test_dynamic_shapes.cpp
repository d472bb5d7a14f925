// Tests of tracer/dynamic_shapes.h: the dynamic-dim list and the naming of
// symbolic dims from their sizes at the sample points.
#include <gtest/gtest.h>

#include "tracer/dynamic_shapes.h"

namespace kiln::tracer {
namespace {

// Sizes of a dim computed as f(s) at the sample points of a symbol of size
// a (scaled points unless `table` says otherwise).
std::vector<int64_t> at_points(int64_t a, int64_t (*f)(int64_t), const SymbolTable& table = SymbolTable()) {
  std::vector<int64_t> out;
  for (int p = 0; p < SymbolTable::kPoints; ++p) out.push_back(f(table.at_point(a, p)));
  return out;
}

TEST(DynamicDims, AddIsIdempotent) {
  DynamicDims dims;
  EXPECT_TRUE(dims.empty());
  EXPECT_TRUE(dims.add("L['x']", 0));
  EXPECT_FALSE(dims.add("L['x']", 0));
  EXPECT_TRUE(dims.add("L['x']", 1));
  EXPECT_TRUE(dims.contains("L['x']", 1));
  EXPECT_FALSE(dims.contains("L['y']", 0));
  EXPECT_FALSE(dims.empty());
}

TEST(SymbolTable, NamesAffineDims) {
  SymbolTable symbols;
  ASSERT_EQ(symbols.new_symbol(8), 0);
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return s; }).data()), "s0");
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return 3 * s; }).data()), "3*s0");
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return s + 2; }).data()), "s0+2");
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return 2 * s - 1; }).data()), "2*s0-1");
  // Not affine in s0: named "?".
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return s * s; }).data()), "?");
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return s / 3; }).data()), "?");
}

TEST(SymbolTable, PrefersTheSymbolThatIsTheDimItself) {
  SymbolTable symbols;
  symbols.new_symbol(4);
  symbols.new_symbol(8);
  EXPECT_EQ(symbols.name_dim(at_points(8, [](int64_t s) { return s; }).data()), "s1");
}

TEST(SymbolTable, ShiftedPointsAddTheFirstSymbolsSize) {
  SymbolTable symbols;
  symbols.use_shifted_points();
  symbols.new_symbol(17);  // a mask one longer than the cache
  symbols.new_symbol(16);
  EXPECT_EQ(symbols.at_point(17, 1), 34);
  EXPECT_EQ(symbols.at_point(16, 2), 50);  // the difference of the two stays 1
  EXPECT_EQ(symbols.point_offset(), 17);
  // Every symbol gains alike: which one a dim follows is unknown.
  EXPECT_EQ(symbols.name_dim(at_points(16, [](int64_t s) { return s; }, symbols).data()), "?");
  EXPECT_EQ(symbols.name_dim(at_points(16, [](int64_t s) { return s / 2; }, symbols).data()), "?");
  SymbolTable one;
  one.use_shifted_points();
  one.new_symbol(16);
  EXPECT_EQ(one.name_dim(at_points(16, [](int64_t s) { return 2 * s + 1; }, one).data()), "2*s0+1");
}

TEST(SymbolTable, IsBounded) {
  SymbolTable symbols;
  for (int i = 0; i < SymbolTable::kMaxSymbols; ++i) EXPECT_EQ(symbols.new_symbol(2 + i), i);
  EXPECT_EQ(symbols.new_symbol(100), -1);
}

}  // namespace
}  // namespace kiln::tracer
