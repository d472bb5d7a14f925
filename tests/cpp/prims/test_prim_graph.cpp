// Tests of prims/prim_graph.h: building, verifying and printing prim graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prims/prim_graph.h"
#include "prims/subgraph.h"
#include "tests/cpp/prims/prim_graph_test_util.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::prims {
namespace {

using test::add_in_place;
using test::f32;

TEST(PrimGraph, BuildsAndPrintsNodesWithScalarsAndAttributes) {
  PrimGraph g;
  const int x = g.add_input(f32({4, 8}));
  const int y = g.add_node1(Prim::Add, {PrimArg::of_value(x), PrimArg::of_scalar(Scalar::of_float(1))}, {}, f32({4, 8}));
  PrimAttrs sum;
  sum.dims = {1};
  const int s = g.add_node1(Prim::Sum, {PrimArg::of_value(y)}, sum, f32({4}));
  PrimAttrs vm;
  vm.dims = {0};
  vm.keepdim = true;
  vm.correction = 0;
  std::vector<int> var_mean = g.add_node(Prim::VarMean, {PrimArg::of_value(x)}, vm, {f32({1, 8}), f32({1, 8})});
  g.set_outputs({s, var_mean[1]});
  EXPECT_EQ(g.verify(), "");
  EXPECT_EQ(format_prim_graph(g),
            "%0 = input : f32[4, 8]\n"
            "%1 = add(%0, 1.0) : f32[4, 8]\n"
            "%2 = sum(%1, dims=[1], keepdim=False) : f32[4]\n"
            "%3, %4 = var_mean(%0, dims=[0], keepdim=True, correction=0) : f32[1, 8], f32[1, 8]\n"
            "return (%2, %4)\n");
  EXPECT_EQ(g.value(var_mean[1]).node, 2);
  EXPECT_EQ(g.value(var_mean[1]).index, 1);
}

TEST(PrimGraph, DropDeadNodesKeepsWhatOutputsReadAndCallsWithEffects) {
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int dead = g.add_node1(Prim::Neg, {PrimArg::of_value(x)}, {}, f32({4}));
  g.add_node1(Prim::Exp, {PrimArg::of_value(dead)}, {}, f32({4}));  // reads a dead value, unread itself
  PrimAttrs draw;
  draw.dtype = graph::DType::Float32;
  g.add_node1(Prim::Bernoulli, {PrimArg::of_value(x)}, draw, f32({4}));  // advances the generator
  const int live = g.add_node1(Prim::Add, {PrimArg::of_value(x), PrimArg::of_scalar(Scalar::of_float(1))}, {},
                               f32({4}));
  g.set_outputs({live});
  PrimGraph out;
  ASSERT_TRUE(drop_dead_nodes(g, &out));
  EXPECT_EQ(out.verify(), "");
  ASSERT_EQ(out.nodes().size(), 2u);
  EXPECT_EQ(out.node(0).prim, Prim::Bernoulli);
  EXPECT_EQ(out.node(1).prim, Prim::Add);
  EXPECT_EQ(out.inputs().size(), 1u);
  PrimGraph again;
  EXPECT_FALSE(drop_dead_nodes(out, &again));
}

std::vector<Prim> prims_in_order(const PrimGraph& g) {
  std::vector<Prim> out;
  for (const PrimNode& node : g.nodes()) out.push_back(node.prim);
  return out;
}

TEST(PrimGraph, SinkToFirstUseMovesLateNodesDownToTheirFirstReader) {
  // exp(a) and tanh(a) are late: they move down to where g's chain needs
  // them, tanh before exp as their readers come.
  PrimGraph g;
  const int a = g.add_input(f32({4}));
  const int grad = g.add_input(f32({4}));
  const int e = g.add_node1(Prim::Exp, {PrimArg::of_value(a)}, {}, f32({4}));
  const int t = g.add_node1(Prim::Tanh, {PrimArg::of_value(a)}, {}, f32({4}));
  const int neg = g.add_node1(Prim::Neg, {PrimArg::of_value(t)}, {}, f32({4}));  // late, reads a late node
  const int two = g.add_node1(Prim::Mul, {PrimArg::of_value(grad), PrimArg::of_scalar(Scalar::of_float(2))}, {},
                              f32({4}));
  const int sum = g.add_node1(Prim::Add, {PrimArg::of_value(two), PrimArg::of_value(neg)}, {}, f32({4}));
  const int out = g.add_node1(Prim::Mul, {PrimArg::of_value(sum), PrimArg::of_value(e)}, {}, f32({4}));
  g.set_outputs({out});
  PrimGraph sunk;
  ASSERT_TRUE(sink_to_first_use(g, {true, true, true, false, false, false}, &sunk));
  EXPECT_EQ(sunk.verify(), "");
  EXPECT_EQ(prims_in_order(sunk), (std::vector<Prim>{Prim::Mul, Prim::Tanh, Prim::Neg, Prim::Add, Prim::Exp, Prim::Mul}));
  EXPECT_EQ(sunk.inputs().size(), 2u);
  PrimGraph again;
  EXPECT_FALSE(sink_to_first_use(g, {false, false, false, false, false, false}, &again));
}

TEST(PrimGraph, SinkToFirstUseKeepsALateReaderBeforeAnExternThatMayWriteItsInput) {
  // neg(x) reads x before an extern call that may write x (Note [Extern
  // writes]); it stays before the call although its reader comes after.
  PrimGraph g;
  const int x = g.add_input(f32({4}));
  const int grad = g.add_input(f32({4}));
  const int neg = g.add_node1(Prim::Neg, {PrimArg::of_value(x)}, {}, f32({4}));
  const int written = add_in_place(g, x, grad);
  const int out = g.add_node1(Prim::Add, {PrimArg::of_value(written), PrimArg::of_value(neg)}, {}, f32({4}));
  g.set_outputs({out});
  PrimGraph sunk;
  EXPECT_FALSE(sink_to_first_use(g, {true, false, false}, &sunk));
}

TEST(PrimGraph, VerifyFindsUseBeforeDefinition) {
  PrimGraph g;
  const int x = g.add_input(f32({2}));
  g.add_node1(Prim::Neg, {PrimArg::of_value(x + 5)}, {}, f32({2}));
  EXPECT_THAT(g.verify(), ::testing::HasSubstr("uses %5, which is not made before it"));
}

TEST(PrimGraph, ExternNodesKeepTheirCallableAndArguments) {
  test::PyRef conv = test::eval("torch.nn.functional.conv2d");
  PrimGraph g;
  const int x = g.add_input(f32({1, 3, 8, 8}));
  const int w = g.add_input(f32({4, 3, 3, 3}));
  PrimAttrs attrs;
  attrs.target = conv.get();
  Py_INCREF(attrs.target);
  attrs.target_name = "F.conv2d";
  attrs.extern_args = {graph::Arg::of_node(x), graph::Arg::of_node(w)};
  test::PyRef one = test::eval("1");
  attrs.extern_kwargs.emplace_back("padding", graph::Arg::of_constant(one.get()));
  const Py_ssize_t before = Py_REFCNT(conv.get());
  {
    PrimAttrs copy = attrs;
    EXPECT_EQ(Py_REFCNT(conv.get()), before + 1);
  }
  EXPECT_EQ(Py_REFCNT(conv.get()), before);
  const int y = g.add_node1(Prim::Extern, {}, std::move(attrs), f32({1, 4, 8, 8}));
  g.set_outputs({y});
  EXPECT_EQ(g.verify(), "");
  EXPECT_THAT(format_prim_graph(g),
              ::testing::HasSubstr("%2 = extern F.conv2d(%0, %1, padding=1) : f32[1, 4, 8, 8]\n"));
}

TEST(Scalar, FormatsAsPython) {
  EXPECT_EQ(format_scalar(Scalar::of_float(0.1)), "0.1");
  EXPECT_EQ(format_scalar(Scalar::of_float(-2)), "-2.0");
  EXPECT_EQ(format_scalar(Scalar::of_int(-3)), "-3");
  EXPECT_EQ(format_scalar(Scalar::of_bool(true)), "True");
  EXPECT_EQ(format_scalar(Scalar::of_float(1e300 * 1e300)), "inf");
}

}  // namespace
}  // namespace kiln::prims

#include "prims/prim_builder.h"
#include "prims/prim_error.h"

namespace kiln::prims {
namespace {

TEST(PrimBuilder, InfersMetasAndCanonicalAttributes) {
  PrimGraph g;
  PrimBuilder b(g);
  const int x = g.add_input(f32({2, 3, 4}));
  const int m = b.reduce(Prim::Amax, x, {-1}, true);
  const int d = b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(m));
  const int e = b.unary(Prim::Exp, d);
  const int v = b.view(e, {-1, 4});
  const int p = b.permute(v, {-1, 0});
  auto [var, mean] = b.var_mean(x, {0, -1}, 1, false);
  const int i = b.convert(b.unary(Prim::IsNan, var), DType::Int64);
  g.set_outputs({p, mean, i});
  EXPECT_EQ(g.verify(), "");
  EXPECT_EQ(format_prim_graph(g),
            "%0 = input : f32[2, 3, 4]\n"
            "%1 = amax(%0, dims=[2], keepdim=True) : f32[2, 3, 1]\n"
            "%2 = sub(%0, %1) : f32[2, 3, 4]\n"
            "%3 = exp(%2) : f32[2, 3, 4]\n"
            "%4 = view(%3, sizes=[6, 4]) : f32[6, 4]\n"
            "%5 = permute(%4, dims=[1, 0]) : f32[4, 6] stride=(1, 4)\n"
            "%6, %7 = var_mean(%0, dims=[0, 2], keepdim=False, correction=1) : f32[3], f32[3]\n"
            "%8 = isnan(%6) : b8[3]\n"
            "%9 = convert_element_type(%8, dtype=int64) : i64[3]\n"
            "return (%5, %7, %9)\n");
}

TEST(PrimBuilder, RejectsBadInputBeforeAppending) {
  PrimGraph g;
  PrimBuilder b(g);
  const int x = g.add_input(f32({2, 3}));
  const int y = g.add_input(f32({4}));
  EXPECT_THROW(b.binary(Prim::Add, PrimArg::of_value(x), PrimArg::of_value(y)), PrimError);
  EXPECT_THROW(b.reduce(Prim::Sum, x, {2}, false), PrimError);
  EXPECT_THROW(b.view(x, {5}), PrimError);
  EXPECT_THROW(b.pointwise(Prim::Sum, {PrimArg::of_value(x)}), PrimError);
  EXPECT_TRUE(g.nodes().empty());
}

}  // namespace
}  // namespace kiln::prims
