// Tests of prims/layout.h: contiguity, density and memory-format queries
// against torch's, over the zoo and random layouts.
#include <gtest/gtest.h>

#include <string>

#include "prims/layout.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

bool torch_bool(const std::string& expression) {
  test::Outcome outcome = test::run_torch(expression);
  EXPECT_FALSE(outcome.raised()) << expression << ": " << outcome.error;
  return !outcome.raised() && outcome.value.get() == Py_True;
}

TEST(PrimLayout, QueriesMatchTorch) {
  test::exec_in_zoo(R"PY(
import random
_lrng = random.Random(7)
LAYOUTS = []
for _ in range(300):
    shape = [_lrng.choice([0, 1, 2, 3]) for _ in range(_lrng.randint(0, 5))]
    t = torch.zeros([s * _lrng.choice([1, 2]) for s in shape])
    t = t[tuple(slice(None, None, _lrng.choice([1, 2])) for _ in shape)]
    perm = list(range(len(shape))); _lrng.shuffle(perm)
    LAYOUTS.append(t.permute(perm))
LAYOUTS += [f2345cl, f1345cl, f2315cl, f23456cl, f23e, f1e, f2e3, f30t]
)PY");
  const long count = test::zoo_int("len(LAYOUTS)");
  for (long i = 0; i < count; ++i) {
    const std::string t = "LAYOUTS[" + std::to_string(i) + "]";
    const graph::TensorMeta m = test::meta_of(t);
    EXPECT_EQ(is_contiguous(m.sizes, m.strides), torch_bool(t + ".is_contiguous()")) << test::describe(m);
    EXPECT_EQ(is_channels_last_contiguous(m.sizes, m.strides),
              m.sizes.size() == 4 && torch_bool(t + ".is_contiguous(memory_format=torch.channels_last)"))
        << test::describe(m);
    // clone() keeps exactly the strides of a dense tensor and makes others dense.
    EXPECT_EQ(is_non_overlapping_and_dense(m.sizes, m.strides),
              torch_bool(t + ".clone().stride() == " + t + ".stride()"))
        << test::describe(m);
    EXPECT_EQ(preserved_strides(m.sizes, m.strides), test::meta_of(t + ".clone()").strides)
        << test::describe(m);
  }
}

TEST(PrimLayout, StridesAgreeIgnoresSizeOneDims) {
  // [2, 8, 1, 1] channels-last and contiguous address the same elements.
  EXPECT_TRUE(strides_agree({2, 8, 1, 1}, {8, 1, 8, 8}, {8, 1, 1, 1}));
  EXPECT_FALSE(strides_agree({2, 8, 3, 1}, {24, 1, 8, 8}, {24, 3, 1, 1}));
  EXPECT_FALSE(strides_agree({2, 8}, {8, 1}, {8}));  // ranks differ
}

}  // namespace
}  // namespace kiln::prims
