// Tests of prims/index_meta.h against torch.gather, torch.scatter(_add),
// torch.index_select and aten::index_put, including their shape and dtype
// errors. Index values stay in bounds (out-of-bounds errors depend on data,
// not metadata). int32 index tensors are left out of the torch comparison where
// torch 1.13 and 2.x disagree (gather, scatter, index_put).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "prims/index_meta.h"
#include "tests/cpp/prims/prim_test_util.h"

namespace kiln::prims {
namespace {

using graph::TensorMeta;
using test::meta_of;
using test::Tally;

const char* kIndexSource = R"PY(
ix2 = torch.tensor([[0, 0]]); ix2t = torch.tensor([[0, 0]]).t(); ix33 = torch.zeros(3, 3, dtype=torch.long)
ix0 = torch.tensor(0); ix1 = torch.tensor([0]); ix3 = torch.tensor([0, 0, 0]); ixe = torch.zeros(0, dtype=torch.long)
ix12 = torch.zeros(1, 2, dtype=torch.long); ix21 = torch.zeros(2, 1, dtype=torch.long)
ix234 = torch.zeros(2, 3, 4, dtype=torch.long); ix214 = torch.zeros(2, 1, 4, dtype=torch.long)
ixf = torch.tensor([0., 1.]); ix3i = torch.tensor([0, 0, 0], dtype=torch.int32)
)PY";

const std::vector<std::string>& index_tensors() {
  static const std::vector<std::string> names = {"ix2",  "ix2t", "ix33", "ix0",   "ix1",  "ix3",
                                                 "ixe",  "ix12", "ix21", "ix234", "ix214", "ixf"};
  return names;
}

const std::vector<std::string>& inputs() {
  static const std::vector<std::string> names = {"f23",  "f23t", "f23s", "f23e",  "f3",   "f0",
                                                 "f234", "f234p", "f2345cl", "f23g", "i64_3"};
  return names;
}

TEST(PrimIndex, GatherAndScatterMatchTorch) {
  test::exec_in_zoo(kIndexSource);
  Tally tally;
  tally.confirm_every = 12;
  for (const std::string& a : inputs()) {
    for (const std::string& index : index_tensors()) {
      for (int64_t dim : {0, 1, -1, 2}) {
        const std::string d = std::to_string(dim);
        test::expect_agree1("torch.gather(" + a + ", " + d + ", " + index + ")",
                            [&] { return gather_meta(meta_of(a), dim, meta_of(index)); }, &tally);
        for (const std::string& src : {a, std::string("f234"), std::string("f3")}) {
          test::expect_agree1("torch.scatter(" + a + ", " + d + ", " + index + ", " + src + ")",
                              [&] {
                                const TensorMeta s = meta_of(src);
                                return scatter_meta(meta_of(a), dim, meta_of(index), &s);
                              },
                              &tally);
          test::expect_agree1("torch.scatter_add(" + a + ", " + d + ", " + index + ", " + src + ")",
                              [&] {
                                const TensorMeta s = meta_of(src);
                                return scatter_meta(meta_of(a), dim, meta_of(index), &s);
                              },
                              &tally);
        }
        test::expect_agree1("torch.scatter(" + a + ", " + d + ", " + index + ", 1.5)",
                            [&] { return scatter_meta(meta_of(a), dim, meta_of(index), nullptr); },
                            &tally);
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 200);
  EXPECT_GT(tally.agreed_errors, 50);
}

TEST(PrimIndex, IndexSelectMatchesTorch) {
  test::exec_in_zoo(kIndexSource);
  Tally tally;
  tally.confirm_every = 2;
  for (const std::string& a : inputs()) {
    for (std::string index : {"ix0", "ix1", "ix3", "ixe", "ix12", "ixf", "ix3i"}) {
      for (int64_t dim : {0, 1, -1, 3}) {
        // torch 1.13 ignores extra indices into a 0-dim tensor; 2.x and kiln reject them.
        if (a == "f0" && test::numel_of(index) != 1) continue;
        test::expect_agree1("torch.index_select(" + a + ", " + std::to_string(dim) + ", " + index + ")",
                            [&] { return index_select_meta(meta_of(a), dim, meta_of(index)); }, &tally);
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 100);
  EXPECT_GT(tally.agreed_errors, 30);
  test::expect_prim_error([] { index_select_meta(meta_of("f0"), 0, meta_of("ix3")); },
                          "index_select: index to a 0-dim tensor must have exactly 1 value");
}

TEST(PrimIndex, IndexPutMatchesTorch) {
  test::exec_in_zoo(kIndexSource);
  test::exec_in_zoo("v1 = torch.ones(1); v4 = torch.ones(4); v24 = torch.ones(2, 4); v32 = torch.ones(3, 2)\n"
                    "v2 = torch.ones(2); v3d = torch.ones(3, dtype=torch.float64); v232 = torch.ones(2, 3, 2)\n"
                    "vg = torch.ones(2, requires_grad=True)\n");
  // Each index list as Python source and as kiln's optional metas (by zoo name).
  const std::vector<std::vector<std::string>> index_lists = {
      {"ix3"}, {"ix0"}, {"None", "ix1"}, {"ix3", "None", "ix1"}, {"None", "ix21", "ix12"},
      {"ix1", "ix1"}, {"ix3", "ix2"}, {"ix1", "ix1", "ix1", "ix1", "ix1"}, {"ixf"}, {"None", "ix3"}};
  Tally tally;
  tally.confirm_every = 4;
  for (const char* a : {"f23", "f23t", "f23s", "f234", "f234p", "f2345cl", "f23g"}) {
    for (const auto& indices : index_lists) {
      std::string py = "[";
      std::vector<std::optional<TensorMeta>> metas;
      for (const std::string& index : indices) {
        py += index + ", ";
        if (index == "None") {
          metas.push_back(std::nullopt);
        } else {
          metas.push_back(meta_of(index));
        }
      }
      py += "]";
      for (const char* values : {"v1", "v4", "v24", "v32", "v2", "v3d", "v232", "vg", "f0"}) {
        test::expect_agree1("torch.ops.aten.index_put.default(" + std::string(a) + ", " + py + ", " +
                                values + ")",
                            [&] { return index_put_meta(meta_of(a), metas, meta_of(values)); }, &tally);
      }
    }
  }
  EXPECT_GT(tally.agreed_results, 50);
  EXPECT_GT(tally.agreed_errors, 30);
  test::expect_prim_error([] { index_put_meta(meta_of("f23"), {std::nullopt}, meta_of("v1")); },
                          "index_put: expected at least one index tensor");
}

TEST(PrimIndex, IndexedShapeMovesNonAdjacentIndicesFirst) {
  test::exec_in_zoo(kIndexSource);
  const TensorMeta f2345 = meta_of("f2345");
  EXPECT_EQ(indexed_shape("t", f2345, {std::nullopt, meta_of("ix21"), meta_of("ix12")}),
            (std::vector<int64_t>{2, 2, 2, 5}));
  EXPECT_EQ(indexed_shape("t", f2345, {meta_of("ix21"), std::nullopt, meta_of("ix12")}),
            (std::vector<int64_t>{2, 2, 3, 5}));
  EXPECT_EQ(indexed_shape("t", f2345, {meta_of("ix0")}), (std::vector<int64_t>{3, 4, 5}));
  // The same shapes through torch's own advanced indexing.
  EXPECT_EQ(meta_of("f2345[:, ix21, ix12]").sizes, (std::vector<int64_t>{2, 2, 2, 5}));
  EXPECT_EQ(meta_of("f2345[ix21, :, ix12]").sizes, (std::vector<int64_t>{2, 2, 3, 5}));
}

}  // namespace
}  // namespace kiln::prims
