// Tests of prims/common_nodes.h: repeated pure nodes are merged, and the
// cases Note [Common nodes] keeps apart stay apart.
#include <gtest/gtest.h>

#include "prims/common_nodes.h"
#include "prims/prim_graph.h"
#include "tests/cpp/prims/prim_graph_test_util.h"

namespace kiln::prims {
namespace {

using test::add_in_place;
using test::f32;

int where_mask(PrimGraph& g, int mask) {
  // where(mask, 0, -65504): the additive form of a boolean attention mask.
  return g.add_node1(Prim::Where,
                     {PrimArg::of_value(mask), PrimArg::of_scalar(Scalar::of_float(0)),
                      PrimArg::of_scalar(Scalar::of_float(-65504))},
                     {}, f32({4, 4}));
}

TEST(CommonNodes, RepeatedWorkIsDoneOnceAndChainsMergeToo) {
  PrimGraph g;
  const int mask = g.add_input(f32({4, 4}));
  const int x = g.add_input(f32({4, 4}));
  const int a = where_mask(g, mask);
  const int a_neg = g.add_node1(Prim::Neg, {PrimArg::of_value(a)}, {}, f32({4, 4}));
  const int b = where_mask(g, mask);                                                  // repeats a
  const int b_neg = g.add_node1(Prim::Neg, {PrimArg::of_value(b)}, {}, f32({4, 4}));  // then repeats a_neg
  const int other = g.add_node1(Prim::Where,
                                {PrimArg::of_value(mask), PrimArg::of_scalar(Scalar::of_float(0)),
                                 PrimArg::of_scalar(Scalar::of_float(-1e4))},
                                {}, f32({4, 4}));  // another constant: kept
  const int sum = g.add_node1(Prim::Add, {PrimArg::of_value(a_neg), PrimArg::of_value(b_neg)}, {}, f32({4, 4}));
  const int out = g.add_node1(Prim::Add, {PrimArg::of_value(sum), PrimArg::of_value(other)}, {}, f32({4, 4}));
  const int out2 = g.add_node1(Prim::Mul, {PrimArg::of_value(out), PrimArg::of_value(x)}, {}, f32({4, 4}));
  g.set_outputs({out2});
  PrimGraph merged;
  ASSERT_TRUE(merge_common_nodes(g, &merged));
  EXPECT_EQ(merged.verify(), "");
  EXPECT_EQ(merged.nodes().size(), 6u) << format_prim_graph(merged);
  // The sum reads one negation twice.
  const PrimNode& add = merged.node(3);
  ASSERT_EQ(add.prim, Prim::Add);
  EXPECT_EQ(add.args[0].value, add.args[1].value);
  PrimGraph again;
  EXPECT_FALSE(merge_common_nodes(merged, &again));
}

TEST(CommonNodes, TwoOutputsStayTwoTensorsAndRandomDrawsStayApart) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int y1 = g.add_node1(Prim::Exp, {PrimArg::of_value(x)}, {}, f32({4}));
  const int y2 = g.add_node1(Prim::Exp, {PrimArg::of_value(x)}, {}, f32({4}));
  PrimAttrs draw;
  draw.dtype = graph::DType::Float32;
  const int r1 = g.add_node1(Prim::Bernoulli, {PrimArg::of_value(x)}, draw, f32({4}));
  const int r2 = g.add_node1(Prim::Bernoulli, {PrimArg::of_value(x)}, draw, f32({4}));
  g.set_outputs({y1, y2, r1, r2});
  PrimGraph merged;
  EXPECT_FALSE(merge_common_nodes(g, &merged));
}

TEST(CommonNodes, ReadsOfATensorAnExternWritesStayApart) {
  // neg(x) before and after x.add_(1) differ.
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int before = g.add_node1(Prim::Neg, {PrimArg::of_value(x)}, {}, f32({4}));
  add_in_place(g, x, before);
  const int after = g.add_node1(Prim::Neg, {PrimArg::of_value(x)}, {}, f32({4}));
  const int out = g.add_node1(Prim::Add, {PrimArg::of_value(before), PrimArg::of_value(after)}, {}, f32({4}));
  g.set_outputs({out});
  PrimGraph merged;
  EXPECT_FALSE(merge_common_nodes(g, &merged));
}

}  // namespace
}  // namespace kiln::prims
