// Tests of prims/constant_subgraphs.h: what reads no input is split off
// and kept, and the cases Note [Constant subgraphs] leaves alone stay in.
#include <gtest/gtest.h>

#include "prims/constant_subgraphs.h"
#include "prims/prim_graph.h"
#include "tests/cpp/prims/prim_graph_test_util.h"

namespace kiln::prims {
namespace {

using test::add_in_place;
using test::f32;

int full(PrimGraph& g, double value) {
  PrimAttrs attrs;
  attrs.sizes = {4};
  attrs.value = Scalar::of_float(value);
  attrs.dtype = graph::DType::Float32;
  return g.add_node1(Prim::Full, {}, attrs, f32({4}));
}

int exp_of(PrimGraph& g, int v) { return g.add_node1(Prim::Exp, {PrimArg::of_value(v)}, {}, f32({4})); }

int add(PrimGraph& g, int a, int b) {
  return g.add_node1(Prim::Add, {PrimArg::of_value(a), PrimArg::of_value(b)}, {}, f32({4}));
}

TEST(ConstantSubgraphs, WorkOnConstantsIsKeptAndTheRestReadsItAsAnInput) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int c = full(g, 2);
  const int e = exp_of(g, c);                    // constant work: kept
  const int y = add(g, x, e);
  const int z = add(g, y, full(g, 3));           // a lone fill: made by the rest
  g.set_outputs({z});
  const std::optional<ConstantSplit> split = split_constant_subgraphs(g);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->constants.verify(), "");
  EXPECT_EQ(split->rest.verify(), "");
  EXPECT_EQ(split->kept, std::vector<int>{e});
  EXPECT_EQ(split->constants.inputs().size(), 0u);
  EXPECT_EQ(split->constants.outputs().size(), 1u);
  EXPECT_EQ(split->constants.nodes().size(), 2u) << format_prim_graph(split->constants);
  ASSERT_EQ(split->rest.inputs().size(), 2u);  // x, then the kept exp
  // The rest: its own fill, two adds; no exp.
  EXPECT_EQ(split->rest.nodes().size(), 3u) << format_prim_graph(split->rest);
  for (const PrimNode& node : split->rest.nodes()) EXPECT_NE(node.prim, Prim::Exp);
  EXPECT_EQ(split->folded_nodes, 2);
  EXPECT_EQ(split->kept_bytes, 16);
}

TEST(ConstantSubgraphs, OnlyFillsOrInputReadsGiveNoSplit) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int e = exp_of(g, x);
  g.set_outputs({add(g, e, full(g, 1))});
  EXPECT_FALSE(split_constant_subgraphs(g).has_value());
}

TEST(ConstantSubgraphs, ReturnedOrOutsideWrittenConstantsStay) {
  {
    // exp(full) returned: the caller could write a kept tensor.
    PrimGraph g;
    const int x = g.add_input(f32({4}));
    const int e = exp_of(g, full(g, 2));
    g.set_outputs({add(g, x, e), e});
    EXPECT_FALSE(split_constant_subgraphs(g).has_value());
  }
  {
    // exp(full) written in place with an input afterwards.
    PrimGraph g;
    const int x = g.add_input(f32({4}));
    const int e = exp_of(g, full(g, 2));
    const int y = add(g, x, e);
    add_in_place(g, e, x);
    g.set_outputs({add(g, y, e)});
    EXPECT_FALSE(split_constant_subgraphs(g).has_value());
  }
  {
    // A constant write after a reader that is not constant: running the
    // constants first would show the reader the write.
    PrimGraph g;
    const int x = g.add_input(f32({4}));
    const int e = exp_of(g, full(g, 2));
    const int y = add(g, x, e);
    const int two = full(g, 2);
    add_in_place(g, e, two);
    g.set_outputs({add(g, y, e)});
    EXPECT_FALSE(split_constant_subgraphs(g).has_value()) << "Tensor.add_ is no known deterministic extern";
  }
}

TEST(ConstantSubgraphs, LeavesMadeToNeedAGradientAreNeverConstant) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  PrimAttrs attrs;
  attrs.sizes = {4};
  attrs.value = Scalar::of_float(1);
  attrs.dtype = graph::DType::Float32;
  graph::TensorMeta leaf = f32({4});
  leaf.requires_grad = true;
  const int w = g.add_node1(Prim::Full, {}, attrs, leaf);
  g.set_outputs({add(g, x, exp_of(g, w))});
  EXPECT_FALSE(split_constant_subgraphs(g).has_value());
}

TEST(ConstantSubgraphs, RandomDrawsAreNeverConstant) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  PrimAttrs draw;
  draw.sizes = {4};
  draw.dtype = graph::DType::Float32;
  draw.value = Scalar::of_float(0);
  draw.value2 = Scalar::of_float(1);
  const int r = g.add_node1(Prim::Uniform, {}, draw, f32({4}));
  g.set_outputs({add(g, x, exp_of(g, r))});
  EXPECT_FALSE(split_constant_subgraphs(g).has_value());
}

}  // namespace
}  // namespace kiln::prims
