// Tests of autograd/joint_graph.h: the joint graph's gradients equal torch
// autograd's over the same forward (run through the prim executor with
// inputs that require grad), in float64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autograd/derivatives.h"
#include "autograd/joint_graph.h"
#include "prims/prim_builder.h"
#include "tests/cpp/autograd/autograd_test_util.h"

namespace kiln::autograd {
namespace {

using prims::Prim;
using prims::PrimArg;
using test::expect_grads_match_torch;
using test::f64;

TEST(JointGraph, ElementwiseBroadcastAndReduction) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({3, 4}));
  const int w = g.add_input(f64({4}));
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(w));
  const int z = b.unary(Prim::Tanh, b.binary(Prim::Add, PrimArg::of_value(y), PrimArg::of_scalar(prims::Scalar::of_float(1))));
  const int s = b.reduce(Prim::Sum, z, {1}, false);
  g.set_outputs({s});
  expect_grads_match_torch(g, {kiln::test::eval("torch.randn(3, 4, dtype=torch.float64)"),
                               kiln::test::eval("torch.randn(4, dtype=torch.float64)")},
                           {true, true});
}

TEST(JointGraph, SoftmaxLikeChainWithAmaxAndViews) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({2, 3, 4}));
  const int m = b.reduce(Prim::Amax, x, {-1}, true);
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(m)));
  const int d = b.binary(Prim::Div, PrimArg::of_value(e), PrimArg::of_value(b.reduce(Prim::Sum, e, {-1}, true)));
  const int v = b.permute(b.view(d, {6, 4}), {1, 0});
  auto [var, mean] = b.var_mean(v, {1}, 1, false);
  g.set_outputs({var, mean});
  expect_grads_match_torch(g, {kiln::test::eval("torch.randn(2, 3, 4, dtype=torch.float64)")}, {true});
}

// Note [Division after the sum]: softmax's backward (the decomposition of
// prims/decompose_call.cpp) divides each element by the row sum once
// (g / s); the sum's gradient divides once per row.
TEST(JointGraph, SoftmaxBackwardDividesEachElementOnce) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({5, 7}));
  const int m = b.reduce(Prim::Amax, x, {-1}, true);
  g.stop_grad(m);  // as prims' softmax: the shift cancels
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(m)));
  const int d = b.binary(Prim::Div, PrimArg::of_value(e), PrimArg::of_value(b.reduce(Prim::Sum, e, {-1}, true)));
  g.set_outputs({d});
  const JointGraph joint = build_joint_graph(g, {true});
  int full_divisions = 0, row_divisions = 0;
  for (const prims::PrimNode& node : joint.graph.nodes()) {
    if (node.prim != Prim::Div) continue;
    const std::vector<int64_t>& sizes = joint.graph.value(node.outputs[0]).meta.sizes;
    if (sizes == std::vector<int64_t>{5, 7}) ++full_divisions;
    if (sizes == std::vector<int64_t>{5, 1}) ++row_divisions;
  }
  EXPECT_EQ(full_divisions, 2);  // the forward's e / s, and the backward's g / s
  EXPECT_EQ(row_divisions, 1);   // -sum(g * y) / s
  expect_grads_match_torch(g, {kiln::test::eval("torch.randn(5, 7, dtype=torch.float64) * 4")}, {true});
}

// index_select's gradient (the embedding backward) scatter-adds: atomics
// on CUDA, where an accumulating index_put would sort the indices.
TEST(JointGraph, IndexSelectGradientIsAScatterAdd) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int table = g.add_input(f64({6, 3}));
  const int ids = g.add_input(graph::TensorMeta{{2, 4}, {4, 1}, graph::DType::Int64});
  const int rows = b.index_select(table, 0, b.reshape(ids, {8}));
  g.set_outputs({b.binary(Prim::Mul, PrimArg::of_value(rows), PrimArg::of_value(rows))});
  const JointGraph joint = build_joint_graph(g, {true, false});
  int scatter_adds = 0, index_puts = 0;
  for (const prims::PrimNode& node : joint.graph.nodes()) {
    scatter_adds += node.prim == Prim::Scatter && node.attrs.accumulate;
    index_puts += node.prim == Prim::IndexPut;
  }
  EXPECT_EQ(scatter_adds, 1);
  EXPECT_EQ(index_puts, 0);
  expect_grads_match_torch(g, {kiln::test::eval("torch.randn(6, 3, dtype=torch.float64)"),
                               kiln::test::eval("torch.tensor([[0, 5, 2, 5], [5, 1, 0, 0]])")},
                           {true, false});
}

// Note [Index ranges]: a position embedding read by an arange gets its
// gradient without a scatter; values and gradients as torch's index_select.
TEST(JointGraph, IndexSelectByAnArangeGetsItsGradientWithoutAScatter) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int table = g.add_input(f64({6, 3}));
  const int whole = b.index_select(table, 0, b.iota(6, 0, 1, graph::DType::Int64));
  const int stepped = b.index_select(table, 0, b.iota(2, 1, 3, graph::DType::Int64));
  g.set_outputs({b.binary(Prim::Mul, PrimArg::of_value(whole), PrimArg::of_value(whole)), stepped});
  const JointGraph joint = build_joint_graph(g, {true});
  for (const prims::PrimNode& node : joint.graph.nodes()) {
    EXPECT_NE(node.prim, Prim::Scatter);
    EXPECT_NE(node.prim, Prim::IndexSelect);
  }
  expect_grads_match_torch(g, {kiln::test::eval("torch.randn(6, 3, dtype=torch.float64)")}, {true});
}

TEST(JointGraph, InputsWithoutGradAndUnusedInputs) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({3}));
  const int c = g.add_input(f64({3}));
  g.add_input(f64({3}));  // unused
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(c));
  g.set_outputs({y});
  JointGraph joint = build_joint_graph(g, {true, false, true});
  EXPECT_GE(joint.input_grads[0], 0);
  EXPECT_EQ(joint.input_grads[1], -1);
  EXPECT_EQ(joint.input_grads[2], -1);
  expect_grads_match_torch(g, {kiln::test::eval("torch.randn(3, dtype=torch.float64)"),
                               kiln::test::eval("torch.randn(3, dtype=torch.float64)"),
                               kiln::test::eval("torch.randn(3, dtype=torch.float64)")},
                           {true, false, true});
}

TEST(JointGraph, NoRuleThrowsNoDerivative) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({3, 2}));
  // prod has a rule now; as_strided of a graph input (storage unknown) has none.
  const int p = b.as_strided(x, {2}, {1}, 0);
  g.set_outputs({p});
  EXPECT_THROW(build_joint_graph(g, {true}), NoDerivative);
}

}  // namespace
}  // namespace kiln::autograd
