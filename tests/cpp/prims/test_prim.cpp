// Tests of prims/prim.h: the list expands into unique names that round-trip
// through lookup, and the elementwise prims name torch functions.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "prims/prim.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

TEST(PrimList, NamesAreUniqueAndRoundTrip) {
  std::set<std::string> names;
  for (int i = 0; i < prim_count(); ++i) {
    const Prim prim = static_cast<Prim>(i);
    EXPECT_TRUE(names.insert(prim_name(prim)).second) << prim_name(prim);
    ASSERT_TRUE(prim_from_name(prim_name(prim)).has_value()) << prim_name(prim);
    EXPECT_EQ(*prim_from_name(prim_name(prim)), prim);
  }
  EXPECT_FALSE(prim_from_name("softmax").has_value());
  EXPECT_EQ(prim_from_name("var_mean"), Prim::VarMean);
  EXPECT_STREQ(prim_name(Prim::FloorDivide), "floor_divide");
  EXPECT_STREQ(family_name(prim_info(Prim::AsStrided).family), "View");
  EXPECT_STREQ(promotion_kind_name(prim_info(Prim::Exp).promotion), "IntToFloat");
}

TEST(PrimList, FactsAreConsistent) {
  for (int i = 0; i < prim_count(); ++i) {
    const Prim prim = static_cast<Prim>(i);
    const PrimInfo& info = prim_info(prim);
    const bool elementwise = info.family == Family::Unary || info.family == Family::Binary ||
                             info.family == Family::Ternary;
    // Exactly the elementwise prims carry a promotion kind.
    EXPECT_EQ(elementwise, info.promotion != PromotionKind::None) << info.name;
    EXPECT_EQ(info.family == Family::View, has_flag(prim, kView)) << info.name;
    if (info.family == Family::Unary) {
      EXPECT_EQ(info.arity, 1) << info.name;
    }
    if (info.family == Family::Binary) {
      EXPECT_EQ(info.arity, 2) << info.name;
    }
  }
}

TEST(PrimList, ElementwisePrimsAreTorchFunctions) {
  for (int i = 0; i < prim_count(); ++i) {
    const Prim prim = static_cast<Prim>(i);
    const Family family = prim_info(prim).family;
    if (family != Family::Unary && family != Family::Binary && family != Family::Ternary) continue;
    if (prim == Prim::TruncDivide) continue;  // torch.div(..., rounding_mode='trunc')
    test::Outcome found = test::run_torch(std::string("callable(torch.") + prim_name(prim) + ")");
    EXPECT_FALSE(found.raised()) << prim_name(prim) << ": " << found.error;
  }
}

}  // namespace
}  // namespace kiln::prims
