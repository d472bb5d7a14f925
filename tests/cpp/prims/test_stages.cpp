// Tests of prims/stages.h: where a graph is cut for gradient buckets, and
// that the stages pass exactly the values that cross a cut (Note
// [Gradient buckets]).
#include <gtest/gtest.h>

#include "prims/prim_graph.h"
#include "prims/stages.h"
#include "tests/cpp/prims/prim_graph_test_util.h"

namespace kiln::prims {
namespace {

using test::f32;

// x -> -(x * w0) -> -(. * w1) -> ... : layer k reads weight k first.
struct Chain {
  PrimGraph graph;
  std::vector<int> layer_out;
};

Chain chain(int layers) {
  Chain c;
  const int x = c.graph.add_input(f32({16}));
  std::vector<int> weights;
  for (int k = 0; k < layers; ++k) weights.push_back(c.graph.add_input(f32({16})));  // 64 bytes each
  int h = x;
  for (int k = 0; k < layers; ++k) {
    const int scaled = c.graph.add_node1(Prim::Mul, {PrimArg::of_value(h), PrimArg::of_value(weights[k])}, {},
                                         f32({16}));
    h = c.graph.add_node1(Prim::Neg, {PrimArg::of_value(scaled)}, {}, f32({16}));
    c.layer_out.push_back(h);
  }
  c.graph.set_outputs({h});
  return c;
}

TEST(Stages, CutsCountEachWeightAtItsFirstReaderFromTheEnd) {
  Chain c = chain(6);
  std::vector<bool> wants(7, true);
  wants[0] = false;  // x
  // Two weights (128 bytes) fill a bucket: cut before layers 4 and 2.
  EXPECT_EQ(gradient_bucket_cuts(c.graph, wants, 128), (std::vector<int>{4, 8}));
  // Three fill it: one cut, before layer 3; the first stage keeps the rest.
  EXPECT_EQ(gradient_bucket_cuts(c.graph, wants, 150), (std::vector<int>{6}));
  // One bucket holds everything: no cut.
  EXPECT_TRUE(gradient_bucket_cuts(c.graph, wants, 1 << 20).empty());
  // Inputs that want no gradient count for nothing.
  EXPECT_TRUE(gradient_bucket_cuts(c.graph, std::vector<bool>(7, false), 64).empty());
}

TEST(Stages, StagesPassTheValuesThatCrossACut) {
  Chain c = chain(3);
  std::vector<Stage> stages = split_stages(c.graph, {2, 4});
  ASSERT_EQ(stages.size(), 3u);
  const std::vector<int>& in = c.graph.inputs();
  for (const Stage& stage : stages) {
    EXPECT_EQ(stage.graph.verify(), "");
    EXPECT_EQ(stage.graph.nodes().size(), 2u);
    EXPECT_EQ(stage.graph.inputs().size(), stage.inputs.size());
    EXPECT_EQ(stage.graph.outputs().size(), stage.outputs.size());
  }
  EXPECT_EQ(stages[0].inputs, (std::vector<int>{in[0], in[1]}));
  EXPECT_EQ(stages[0].outputs, (std::vector<int>{c.layer_out[0]}));
  EXPECT_EQ(stages[1].inputs, (std::vector<int>{in[2], c.layer_out[0]}));
  EXPECT_EQ(stages[1].outputs, (std::vector<int>{c.layer_out[1]}));
  EXPECT_EQ(stages[2].inputs, (std::vector<int>{in[3], c.layer_out[1]}));
  EXPECT_EQ(stages[2].outputs, (std::vector<int>{c.layer_out[2]}));
}

TEST(Stages, AValueReadTwoStagesLaterAndAGraphOutputAreExported) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int a = g.add_node1(Prim::Exp, {PrimArg::of_value(x)}, {}, f32({4}));
  const int b = g.add_node1(Prim::Neg, {PrimArg::of_value(a)}, {}, f32({4}));  // a graph output too
  const int c = g.add_node1(Prim::Neg, {PrimArg::of_value(b)}, {}, f32({4}));
  const int d = g.add_node1(Prim::Add, {PrimArg::of_value(c), PrimArg::of_value(a)}, {}, f32({4}));
  g.set_outputs({d, b, x});
  std::vector<Stage> stages = split_stages(g, {1, 2, 3});
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_EQ(stages[0].outputs, (std::vector<int>{a}));
  EXPECT_EQ(stages[1].outputs, (std::vector<int>{b}));
  EXPECT_EQ(stages[3].inputs, (std::vector<int>{a, c}));
  EXPECT_EQ(stages[3].outputs, (std::vector<int>{d}));
}

}  // namespace
}  // namespace kiln::prims
