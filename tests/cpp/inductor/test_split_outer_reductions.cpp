// Tests of inductor/split_outer_reductions.h (Note [Two-step outer
// reductions]): which reductions split, the graph they become, and that
// the split graph computes what the original does (run by PrimExecutor on
// CPU tensors; the pass reads only metadata).
#include <gtest/gtest.h>

#include <vector>

#include "inductor/split_outer_reductions.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using graph::DType;
using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;

graph::TensorMeta meta(std::vector<int64_t> sizes, DType dtype = DType::Float32) {
  return test::tensor_meta(std::move(sizes), dtype);
}

int count(const PrimGraph& graph, Prim prim) { return test::count_prims(graph, prim); }

TEST(SplitOuterReductions, TallSumsAndExtremesSplitRowReductionsDoNot) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({4096, 24}));
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(x));
  const int sum = b.reduce(Prim::Sum, y, {0}, false);
  const int max = b.reduce(Prim::Amax, x, {0}, true);
  const int rows = b.reduce(Prim::Sum, x, {1}, false);  // innermost: a row reduction already
  graph.set_outputs({sum, max, rows});
  PrimGraph split;
  ASSERT_TRUE(split_outer_reductions(graph, &split));
  EXPECT_EQ(count(split, Prim::Sum), 3);
  EXPECT_EQ(count(split, Prim::Amax), 2);
  EXPECT_EQ(count(split, Prim::View), 2);
  // A second pass finds nothing left to split.
  PrimGraph again;
  EXPECT_FALSE(split_outer_reductions(split, &again));
  test::expect_same_results(graph, split, {"torch.randn(4096, 24)"}, /*exact=*/false);
}

TEST(SplitOuterReductions, ReductionsOverSeveralDimsSplitAtTheOutermost) {
  for (const bool keepdim : {false, true}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(meta({64, 256, 24}));
    const int single = b.reduce(Prim::Sum, b.view(x, {16384, 24}), {0}, keepdim);
    graph.set_outputs({b.reduce(Prim::Sum, x, {0, 1}, keepdim), b.reduce(Prim::Amin, x, {1, 0}, keepdim), single});
    PrimGraph split;
    ASSERT_TRUE(split_outer_reductions(graph, &split));
    EXPECT_EQ(count(split, Prim::Sum), 4);
    EXPECT_EQ(count(split, Prim::Amin), 2);
    SCOPED_TRACE(keepdim ? "keepdim" : "no keepdim");
    test::expect_same_results(graph, split, {"torch.randn(64, 256, 24)"}, /*exact=*/false);
  }
}

TEST(SplitOuterReductions, FewLongRowsSplitTheirRows) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int flat = graph.add_input(meta({1 << 20}));
  const int rows = graph.add_input(meta({4, 1 << 17}));
  const int many = graph.add_input(meta({4096, 24}));
  graph.set_outputs({b.reduce(Prim::Sum, flat, {0}, false), b.reduce(Prim::Amax, flat, {0}, true),
                     b.reduce(Prim::Sum, rows, {1}, true), b.reduce(Prim::Sum, rows, {0, 1}, false),
                     b.reduce(Prim::Amax, rows, {1, 0}, true),
                     // Many rows, or short ones: parallel enough as they are.
                     b.reduce(Prim::Sum, many, {1}, false), b.reduce(Prim::Sum, b.view(rows, {512, 1024}), {1}, false)});
  PrimGraph split;
  ASSERT_TRUE(split_outer_reductions(graph, &split));
  // The first four become two each (the full sum of rows, whose outer dim
  // has too few points to split at, viewed as one dim first); the last two
  // stay.
  EXPECT_EQ(count(split, Prim::Sum), 2 + 2 + 2 + 1 + 1);
  EXPECT_EQ(count(split, Prim::Amax), 4);
  // The first reduction over [128, 8192] views of the flat input: rows of
  // the view's innermost dim.
  bool viewed = false;
  for (const auto& node : split.nodes()) {
    if (node.prim == Prim::View && split.value(node.outputs[0]).meta.sizes == std::vector<int64_t>{128, 8192}) {
      viewed = true;
    }
  }
  EXPECT_TRUE(viewed);
  test::expect_same_results(graph, split, {"torch.randn(1 << 20)", "torch.randn(4, 1 << 17)", "torch.randn(4096, 24)"},
                            /*exact=*/false);
}

TEST(SplitOuterReductions, LowPrecisionSumsKeepFloat32Partials) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({8192, 3, 16}, DType::BFloat16));
  graph.set_outputs({b.reduce(Prim::Sum, x, {0}, false)});
  PrimGraph split;
  ASSERT_TRUE(split_outer_reductions(graph, &split));
  EXPECT_EQ(count(split, Prim::ConvertElementType), 1);
  EXPECT_EQ(split.value(split.outputs()[0]).meta, graph.value(graph.outputs()[0]).meta);
  int partial_sums_in_f32 = 0;
  for (const auto& node : split.nodes()) {
    if (node.prim == Prim::Sum) partial_sums_in_f32 += split.value(node.outputs[0]).meta.dtype == DType::Float32;
  }
  EXPECT_EQ(partial_sums_in_f32, 2);
}

TEST(SplitOuterReductions, ShortWideAndMultiDimReductionsStay) {
  for (const auto& [sizes, dims] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{1000, 24}, {0}},         // too short
           {{4096, 8192}, {0}},       // too many kept points
           {{4096, 8, 24}, {0, 1}},   // two dims
           {{4099, 24}, {0}}}) {      // a prime extent: no step count divides it
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(meta(sizes));
    graph.set_outputs({b.reduce(Prim::Sum, x, dims, false)});
    PrimGraph split;
    EXPECT_FALSE(split_outer_reductions(graph, &split)) << sizes[0] << "x" << sizes[1];
  }
}

TEST(SplitOuterReductions, ChannelsLastMapsReduceOverOuterDims) {
  // Over N, H and W of a channels-last map, C (kept) is innermost in memory:
  // an outer reduction, split; the same sizes contiguous reduce rows (W
  // innermost), 256 of them, parallel enough as they are.
  for (const bool channels_last : {true, false}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const std::vector<int64_t> strides =
        channels_last ? std::vector<int64_t>{262144, 1, 8192, 256} : std::vector<int64_t>{};
    const int x = graph.add_input(test::tensor_meta({8, 256, 32, 32}, DType::Float32, strides));
    graph.set_outputs({b.reduce(Prim::Sum, x, {0, 2, 3}, false)});
    PrimGraph split;
    EXPECT_EQ(split_outer_reductions(graph, &split), channels_last);
    if (channels_last) {
      test::expect_same_results(graph, split, {"torch.randn(8, 256, 32, 32).contiguous(memory_format=torch.channels_last)"},
                                /*exact=*/false);
    }
  }
}

TEST(SplitOuterReductions, BatchNormStatisticsSplitAsSums) {
  // A channels-last batch norm's var_mean over N, H and W (correction 0):
  // split sums in the corrected two-pass form, float32 partials for bf16.
  for (const DType dtype : {DType::Float32, DType::BFloat16}) {
    for (const bool keepdim : {false, true}) {
      PrimGraph graph;
      PrimBuilder b(graph);
      const std::vector<int64_t> sizes = {16, 16, 64, 64};
      const int x = graph.add_input(test::tensor_meta(sizes, dtype, {65536, 1, 1024, 16}));
      const auto [var, mean] = b.var_mean(x, {0, 2, 3}, 0, keepdim);
      const auto [unbiased, _] = b.var_mean(x, {0, 2, 3}, 1, keepdim);  // a correction: kept whole
      graph.set_outputs({var, mean, unbiased});
      PrimGraph split;
      ASSERT_TRUE(split_outer_reductions(graph, &split));
      EXPECT_EQ(count(split, Prim::VarMean), 1);
      EXPECT_EQ(count(split, Prim::Sum), 6);  // three sums, two steps each
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(split.value(split.outputs()[i]).meta.sizes, graph.value(graph.outputs()[i]).meta.sizes);
        EXPECT_EQ(split.value(split.outputs()[i]).meta.dtype, graph.value(graph.outputs()[i]).meta.dtype);
      }
      SCOPED_TRACE(std::string(graph::dtype_name(dtype)) + (keepdim ? " keepdim" : ""));
      test::expect_same_results(
          graph, split,
          {std::string("(torch.randn(16, 16, 64, 64) * 3 + 1).to(torch.") + graph::dtype_name(dtype) +
           ").contiguous(memory_format=torch.channels_last)"},
          /*exact=*/false);
    }
  }
}

}  // namespace
}  // namespace kiln::inductor
