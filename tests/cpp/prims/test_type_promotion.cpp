// Tests of prims/type_promotion.h against torch.promote_types and
// torch.result_type over every dtype pair, with dimensioned tensors, 0-dim
// tensors and Python scalars.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prims/prim_error.h"
#include "prims/type_promotion.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

using test::meta_of;

DType dtype_named(const std::string& short_name) { return meta_of(short_name + "_0").dtype; }

std::string torch_dtype(DType d) { return std::string("torch.") + graph::dtype_name(d); }

DType torch_result(const std::string& expression) {
  test::Outcome outcome = test::run_torch("str(" + expression + ")");
  EXPECT_FALSE(outcome.raised()) << expression << ": " << outcome.error;
  if (outcome.raised()) return DType::Other;
  return graph::dtype_from_name(kiln::test::str_of(outcome.value.get()));
}

// Expects result_type to give torch's answer, or to raise where torch's
// answer is a dtype kiln does not model (complex32).
void expect_result_type(const std::vector<Operand>& operands, const std::string& torch_expression) {
  const DType expected = torch_result(torch_expression);
  if (expected == DType::Other) {
    EXPECT_THROW(result_type("t", operands), PrimError) << torch_expression;
  } else {
    EXPECT_EQ(result_type("t", operands), expected) << torch_expression;
  }
}

TEST(PrimTypePromotion, PromoteTypesMatchesTorchForEveryPair) {
  for (const std::string& a : test::dtype_zoo()) {
    for (const std::string& b : test::dtype_zoo()) {
      const DType da = dtype_named(a), db = dtype_named(b);
      EXPECT_EQ(promote_types(da, db),
                torch_result("torch.promote_types(" + torch_dtype(da) + ", " + torch_dtype(db) + ")"))
          << a << " " << b;
    }
  }
}

TEST(PrimTypePromotion, ResultTypeMatchesTorchAcrossPriorities) {
  const std::vector<std::string> scalars = {"True", "2", "2.5", "1.5j"};
  int compared = 0;
  for (const std::string& a : test::dtype_zoo()) {
    for (const std::string& b : test::dtype_zoo()) {
      for (const char* rank_a : {"_3", "_0"}) {
        for (const char* rank_b : {"_3", "_0"}) {
          const std::string ta = a + rank_a, tb = b + rank_b;
          expect_result_type({Operand::of(meta_of(ta)), Operand::of(meta_of(tb))},
                             "torch.result_type(" + ta + ", " + tb + ")");
          ++compared;
        }
      }
    }
    for (const char* rank : {"_3", "_0"}) {
      const std::string t = a + rank;
      for (size_t k = 0; k < scalars.size(); ++k) {
        const ScalarKind kind = static_cast<ScalarKind>(k);
        expect_result_type({Operand::of(meta_of(t)), Operand::of(kind)},
                           "torch.result_type(" + t + ", " + scalars[k] + ")");
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 600);
}

TEST(PrimTypePromotion, ThreeWayPriorities) {
  // A 0-dim float64 decides over an int32 tensor; a Python float then does not.
  const Operand i32 = Operand::of(meta_of("i32_3")), f64_0 = Operand::of(meta_of("f64_0"));
  EXPECT_EQ(result_type("t", {i32, f64_0, Operand::of(ScalarKind::Float)}), DType::Float64);
  EXPECT_EQ(result_type("t", {Operand::of(meta_of("u8_3")), Operand::of(meta_of("i8_0")),
                              Operand::of(ScalarKind::Int)}),
            DType::UInt8);
  EXPECT_EQ(result_type("t", {Operand::of(meta_of("b_3")), Operand::of(meta_of("b_0")),
                              Operand::of(ScalarKind::Int)}),
            DType::Int64);
  EXPECT_EQ(result_type("t", {Operand::of(meta_of("f64_3")), Operand::of(ScalarKind::Complex)}),
            DType::Complex128);
  EXPECT_EQ(result_type("t", {Operand::of(meta_of("bf16_3")), Operand::of(ScalarKind::Complex)}),
            DType::Complex64);
  EXPECT_EQ(result_type("t", {Operand::of(ScalarKind::Int), Operand::of(ScalarKind::Float)}),
            DType::Float32);
  EXPECT_EQ(result_type("t", {Operand::of(ScalarKind::Int), Operand::of(ScalarKind::Float)},
                        DType::Float64),
            DType::Float64);
  test::expect_prim_error(
      [&] { result_type("add", {Operand::of(meta_of("f16_3")), Operand::of(ScalarKind::Complex)}); },
      "add: a float16 tensor with a complex operand gives complex32");
  test::expect_prim_error([&] { result_type("add", {}); }, "add: expected at least one operand");
}

TEST(PrimTypePromotion, PromotionKinds) {
  const Operand i64 = Operand::of(meta_of("i64_3")), c64 = Operand::of(meta_of("c64_3"));
  const Operand b = Operand::of(meta_of("b_3"));
  EXPECT_EQ(elementwise_dtypes("t", {i64}, PromotionKind::IntToFloat).result, DType::Float32);
  EXPECT_EQ(elementwise_dtypes("t", {b}, PromotionKind::IntToFloat).result, DType::Float32);
  EXPECT_EQ(elementwise_dtypes("t", {c64}, PromotionKind::IntToFloat).result, DType::Complex64);
  EXPECT_EQ(elementwise_dtypes("t", {i64, c64}, PromotionKind::AlwaysBool).result, DType::Bool);
  EXPECT_EQ(elementwise_dtypes("t", {i64, c64}, PromotionKind::AlwaysBool).common, DType::Complex64);
  EXPECT_EQ(elementwise_dtypes("t", {c64}, PromotionKind::ComplexToFloat).result, DType::Float32);
  EXPECT_EQ(elementwise_dtypes("t", {i64}, PromotionKind::ComplexToFloat).result, DType::Int64);
  EXPECT_EQ(elementwise_dtypes("t", {b, i64}, PromotionKind::Default).result, DType::Int64);
}

}  // namespace
}  // namespace kiln::prims
