// Tests of prims/broadcast.h against torch.broadcast_shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prims/broadcast.h"
#include "prims/prim_error.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

using Shape = std::vector<int64_t>;

TEST(PrimBroadcast, MatchesTorchBroadcastShapes) {
  const std::vector<Shape> shapes = {{},     {1},       {3},    {0},       {2, 3}, {2, 1},
                                     {1, 3}, {4, 2, 3}, {4, 1, 1}, {2, 0}, {1, 0}, {3, 1, 2}};
  int errors = 0;
  for (const Shape& a : shapes) {
    for (const Shape& b : shapes) {
      const std::string expression =
          "tuple(torch.broadcast_shapes(" + test::py_tuple(a) + ", " + test::py_tuple(b) + "))";
      test::Outcome torch = test::run_torch(expression);
      std::optional<Shape> kiln = try_broadcast_shapes(a, b);
      ASSERT_EQ(torch.raised(), !kiln.has_value()) << expression << " " << torch.error;
      if (!kiln) {
        ++errors;
        continue;
      }
      EXPECT_EQ(test::py_tuple(*kiln), kiln::test::repr_of(torch.value.get())) << expression;
      EXPECT_TRUE(broadcasts_to(a, *kiln)) << expression;
    }
  }
  EXPECT_GT(errors, 10);
}

TEST(PrimBroadcast, ErrorsNameTheShapes) {
  test::expect_prim_error([] { broadcast_shapes("add", Shape{2, 3}, Shape{4}); },
                          "add: shapes [2, 3] and [4] cannot broadcast");
  test::expect_prim_error([] { broadcast_shapes("where", {Shape{2}, Shape{1}, Shape{0}}); },
                          "where: shapes [2] and [0] cannot broadcast");
  EXPECT_EQ(broadcast_shapes("f", {}), Shape{});
  EXPECT_FALSE(broadcasts_to({2, 3}, {3}));
  EXPECT_FALSE(broadcasts_to({2}, {2, 3}));
  EXPECT_TRUE(broadcasts_to({1, 3}, {5, 2, 3}));
}

}  // namespace
}  // namespace kiln::prims
