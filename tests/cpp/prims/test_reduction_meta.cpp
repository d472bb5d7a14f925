// Tests of prims/reduction_meta.h against torch's reductions over the zoo:
// dims lists (negative, repeated, out of range), keepdim, dtype=, 0-dim and
// size-0 inputs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prims/reduction_meta.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

using test::meta_of;
using test::Tally;
using graph::TensorMeta;

const std::vector<std::vector<int64_t>>& dim_lists() {
  static const std::vector<std::vector<int64_t>> lists = {{},  {0},     {1},     {-1},    {2},
                                                          {3}, {0, 1},  {1, -1}, {0, 0},  {-3, 2},
                                                          {5}, {0, 1, 2}};
  return lists;
}

std::string torch_dims(const std::vector<int64_t>& dims) {
  return dims.empty() ? "None" : test::py_tuple(dims);
}

TEST(PrimReduction, SumProdAmaxAminMatchTorch) {
  Tally tally;
  tally.confirm_every = 4;
  std::vector<std::string> inputs = test::layout_zoo();
  for (const char* d : {"b_3", "i32_3", "u8_0", "c64_3", "f64_0"}) inputs.push_back(d);
  for (const std::string& a : inputs) {
    for (const auto& dims : dim_lists()) {
      for (bool keepdim : {false, true}) {
        const std::string k = keepdim ? "True" : "False";
        // sum(dim=None) has no keepdim overload; an empty list reduces every dim.
        const std::string sum_dims = dims.empty() ? "[]" : test::py_tuple(dims);
        expect_agree1("torch.sum(" + a + ", " + sum_dims + ", keepdim=" + k + ")",
                      [&] { return reduction_meta(Prim::Sum, meta_of(a), dims, keepdim); }, &tally);
        expect_agree1("torch.amax(" + a + ", " + sum_dims + ", keepdim=" + k + ")",
                      [&] { return reduction_meta(Prim::Amax, meta_of(a), dims, keepdim); }, &tally);
        expect_agree1("torch.amin(" + a + ", " + sum_dims + ", keepdim=" + k + ")",
                      [&] { return reduction_meta(Prim::Amin, meta_of(a), dims, keepdim); }, &tally);
        if (dims.size() == 1) {
          expect_agree1("torch.prod(" + a + ", " + std::to_string(dims[0]) + ", keepdim=" + k + ")",
                        [&] { return reduction_meta(Prim::Prod, meta_of(a), dims, keepdim); }, &tally);
          expect_agree1(
              "torch.sum(" + a + ", " + sum_dims + ", keepdim=" + k + ", dtype=torch.float64)",
              [&] { return reduction_meta(Prim::Sum, meta_of(a), dims, keepdim, DType::Float64); },
              &tally);
        }
      }
    }
    expect_agree1("torch.prod(" + a + ")", [&] { return reduction_meta(Prim::Prod, meta_of(a), {}, false); },
                  &tally);
  }
  EXPECT_GT(tally.agreed_results, 800);
  EXPECT_GT(tally.agreed_errors, 100);
}

TEST(PrimReduction, ArgmaxArgminMatchTorch) {
  Tally tally;
  tally.confirm_every = 3;
  std::vector<std::string> inputs = test::layout_zoo();
  for (const char* d : {"b_3", "i32_3", "u8_0", "c64_3", "f16_3"}) inputs.push_back(d);
  for (const std::string& a : inputs) {
    for (const std::vector<int64_t>& dims : dim_lists()) {
      if (dims.size() > 1) continue;
      for (bool keepdim : {false, true}) {
        const std::string args =
            a + ", " + (dims.empty() ? "None" : std::to_string(dims[0])) + ", " + (keepdim ? "True" : "False") + ")";
        expect_agree1("torch.argmax(" + args,
                      [&] { return reduction_meta(Prim::Argmax, meta_of(a), dims, keepdim); }, &tally);
        expect_agree1("torch.argmin(" + args,
                      [&] { return reduction_meta(Prim::Argmin, meta_of(a), dims, keepdim); }, &tally);
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 300);
  EXPECT_GT(tally.agreed_errors, 30);
}

TEST(PrimReduction, VarMeanMatchesTorch) {
  Tally tally;
  tally.confirm_every = 4;
  std::vector<std::string> inputs = test::layout_zoo();
  for (const char* d : {"i32_3", "c64_3", "c128_0", "f64_3", "b_3"}) inputs.push_back(d);
  for (const std::string& a : inputs) {
    for (const auto& dims : dim_lists()) {
      for (bool keepdim : {false, true}) {
        expect_agree("torch.var_mean(" + a + ", " + torch_dims(dims) + ", correction=0, keepdim=" +
                         (keepdim ? "True" : "False") + ")",
                     [&] {
                       VarMeanMeta out = var_mean_meta(meta_of(a), dims, keepdim);
                       return std::vector<TensorMeta>{out.var, out.mean};
                     },
                     &tally);
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 300);
  EXPECT_GT(tally.agreed_errors, 20);
}

TEST(PrimReduction, ErrorsNameTheProblem) {
  const TensorMeta f23 = meta_of("f23");
  test::expect_prim_error([&] { reduction_meta(Prim::Sum, f23, {2}, false); },
                          "sum: dimension out of range (expected to be in range of [-2, 1], but got 2)");
  test::expect_prim_error([&] { reduction_meta(Prim::Sum, f23, {1, -1}, false); },
                          "sum: dim 1 appears multiple times");
  test::expect_prim_error([&] { reduction_meta(Prim::Amax, meta_of("f03"), {0}, false); },
                          "amax: expected reduction dim 0 to have non-zero size");
  test::expect_prim_error([&] { reduction_meta(Prim::Argmax, f23, {0, 1}, false); },
                          "argmax: expected at most one dim");
  test::expect_prim_error([&] { reduction_meta(Prim::Amax, f23, {0}, false, DType::Float64); },
                          "amax: takes no dtype argument");
  test::expect_prim_error([&] { reduction_meta(Prim::VarMean, f23, {0}, false); },
                          "var_mean: not a single-output reduction");
  test::expect_prim_error([&] { var_mean_meta(meta_of("i32_3"), {}, false); },
                          "var_mean: only supports floating point and complex dtypes, got int32");
}

}  // namespace
}  // namespace kiln::prims
