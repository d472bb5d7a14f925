// Tests of prims/view_meta.h against torch's views: sizes, strides and the
// storage offset a view moves to, whether reshape copies, and the errors.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "prims/view_meta.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

using graph::TensorMeta;
using test::meta_of;
using test::Tally;

// Compares a view rule with torch's view, including the storage offset moved.
void check_view(const std::string& base, const std::string& torch_view,
                const std::function<ViewMeta()>& rule, Tally* tally) {
  std::optional<ViewMeta> view;
  test::expect_agree1(torch_view, [&] {
    view = rule();
    return view->meta;
  }, tally);
  if (!view) return;
  test::Outcome offset =
      test::run_torch("(" + torch_view + ").storage_offset() - " + base + ".storage_offset()");
  if (offset.raised()) return;
  EXPECT_EQ(view->offset, PyLong_AsLong(offset.value.get())) << torch_view;
}

std::string list(const std::vector<int64_t>& values) { return test::py_tuple(values); }

const std::vector<std::vector<int64_t>>& target_shapes() {
  static const std::vector<std::vector<int64_t>> shapes = {
      {6}, {-1}, {3, 2}, {2, 3}, {1, 6}, {6, 1}, {2, -1}, {-1, 3}, {1, 2, 1, 3}, {2, 3, 1},
      {}, {1}, {4}, {0}, {0, 3}, {3, 0}, {-1, 0}, {4, 6}, {2, 12}, {-1, -1}, {24}, {2, 3, 4},
      {6, 4}, {2, 2, 6}, {1, 1}, {120}, {2, 60}, {6, 20}, {-2, 3}};
  return shapes;
}

TEST(PrimView, ViewAndReshapeMatchTorch) {
  Tally tally;
  tally.confirm_every = 5;
  int copies = 0;
  for (const std::string& a : test::layout_zoo()) {
    for (const auto& shape : target_shapes()) {
      check_view(a, a + ".view(" + list(shape) + ")",
                 [&] { return view_meta(meta_of(a), shape); }, &tally);
      std::optional<ReshapeMeta> reshaped;
      test::expect_agree1(a + ".reshape(" + list(shape) + ")", [&] {
        reshaped = reshape_meta(meta_of(a), shape);
        return reshaped->meta;
      }, &tally);
      if (!reshaped) continue;
      // reshape returns a view exactly when torch's result shares a's storage.
      test::Outcome shares = test::run_torch(a + ".reshape(" + list(shape) + ")._base is not None or " +
                                             a + ".reshape(" + list(shape) + ").data_ptr() == " +
                                             a + ".data_ptr() and " + a + ".numel() > 0");
      if (test::meta_of(a).sizes == reshaped->meta.sizes || test::numel_of(a) == 0) continue;
      ASSERT_FALSE(shares.raised()) << shares.error;
      EXPECT_EQ(reshaped->is_view, shares.value.get() == Py_True) << a << " " << list(shape);
      copies += reshaped->is_view ? 0 : 1;
    }
  }
  EXPECT_GT(tally.agreed_results, 150);
  EXPECT_GT(tally.agreed_errors, 100);
  EXPECT_GT(copies, 5);
}

TEST(PrimView, ExpandPermuteSqueezeUnsqueezeMatchTorch) {
  Tally tally;
  tally.confirm_every = 3;
  const std::vector<std::vector<int64_t>> expand_shapes = {
      {2, 3}, {-1, -1}, {4, 2, 3}, {1, 2, 3}, {3}, {2, 3, 4}, {2, -1, 4}, {1, 1}, {5, 1, 1},
      {-1, 3}, {2, 2, 3, 4}, {0, 3}, {2, 0}};
  const std::vector<std::vector<int64_t>> perms = {{}, {0}, {1, 0}, {0, 1}, {-1, 0}, {2, 0, 1},
                                                   {0, 0}, {1, 2, 0, 3}, {3, 1, 0, 2}, {0, 2, 1}};
  for (const std::string& a : test::layout_zoo()) {
    for (const auto& shape : expand_shapes) {
      check_view(a, a + ".expand(" + list(shape) + ")", [&] { return expand_meta(meta_of(a), shape); },
                 &tally);
    }
    for (const auto& perm : perms) {
      check_view(a, a + ".permute(" + list(perm) + ")", [&] { return permute_meta(meta_of(a), perm); },
                 &tally);
    }
    for (int64_t dim : {-5, -3, -2, -1, 0, 1, 2, 3, 4}) {
      check_view(a, a + ".squeeze(" + std::to_string(dim) + ")",
                 [&] { return squeeze_meta(meta_of(a), {dim}); }, &tally);
      check_view(a, a + ".unsqueeze(" + std::to_string(dim) + ")",
                 [&] { return unsqueeze_meta(meta_of(a), dim); }, &tally);
    }
    check_view(a, a + ".squeeze()", [&] { return squeeze_meta(meta_of(a)); }, &tally);
  }
  EXPECT_GT(tally.agreed_results, 400);
  EXPECT_GT(tally.agreed_errors, 100);
}

TEST(PrimView, SliceAndAsStridedMatchTorch) {
  Tally tally;
  tally.confirm_every = 25;
  const std::vector<std::optional<int64_t>> bounds = {std::nullopt, 1, -1, -2, 5, -100};
  auto text = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : std::string("None"); };
  for (const std::string& a : test::layout_zoo()) {
    for (int64_t dim : {0, -1, 3}) {
      for (auto start : bounds) {
        for (auto end : bounds) {
          for (int64_t step : {1, 2}) {
            check_view(a,
                       "torch.ops.aten.slice.Tensor(" + a + ", " + std::to_string(dim) + ", " +
                           text(start) + ", " + text(end) + ", " + std::to_string(step) + ")",
                       [&] { return slice_meta(meta_of(a), dim, start, end, step); }, &tally);
          }
        }
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 1000);
  EXPECT_GT(tally.agreed_errors, 10);

  Tally strided;
  const TensorMeta f2345 = meta_of("f2345");
  test::expect_agree1("f2345.as_strided((2, 3), (1, 4), 7)",
                      [&] { return as_strided_meta(f2345, {2, 3}, {1, 4}, 7); }, &strided);
  test::expect_agree1("f2345.as_strided((2, 3), (0, 0))",
                      [&] { return as_strided_meta(f2345, {2, 3}, {0, 0}); }, &strided);
  test::expect_agree1("f2345.as_strided((2, 2), (1, -1))",
                      [&] { return as_strided_meta(f2345, {2, 2}, {1, -1}); }, &strided);
  test::expect_agree1("f2345.as_strided((2, 2), (1,))",
                      [&] { return as_strided_meta(f2345, {2, 2}, {1}); }, &strided);
  EXPECT_EQ(strided.agreed_results, 2);
  EXPECT_EQ(strided.agreed_errors, 2);
}

TEST(PrimView, ErrorsNameTheProblem) {
  const TensorMeta f23t = meta_of("f23t");
  test::expect_prim_error([&] { view_meta(f23t, {6}); }, "view: size [6] is not compatible");
  test::expect_prim_error([&] { view_meta(f23t, {-1, -1}); }, "only one dimension can be inferred");
  test::expect_prim_error([&] { reshape_meta(f23t, {4}); }, "shape '[4]' is invalid for input of size 6");
  test::expect_prim_error([&] { reshape_meta(meta_of("f03"), {0, -1}); }, "cannot reshape tensor of 0 elements");
  test::expect_prim_error([&] { expand_meta(f23t, {3, 3}); },
                          "expand: the expanded size of the tensor (3) must match the existing size (2)");
  test::expect_prim_error([&] { permute_meta(f23t, {0, 0}); }, "permute: dim 0 appears multiple times");
  test::expect_prim_error([&] { slice_meta(meta_of("f0"), 0, 0, 1); }, "slice: cannot be applied to a 0-dim tensor");
  test::expect_prim_error([&] { slice_meta(f23t, 0, 0, 1, 0); }, "slice: step must be positive");
  test::expect_prim_error([&] { unsqueeze_meta(f23t, 3); }, "unsqueeze: dimension out of range");
  EXPECT_FALSE(reshape_meta(f23t, {6}).is_view);
  EXPECT_TRUE(reshape_meta(f23t, {2, 1, 3}).is_view);
}

}  // namespace
}  // namespace kiln::prims
