// Tests of prims/channels_last.h (Note [Channels-last convolutions]): the
// clones the plan adds and drops, the layouts it re-derives and restores,
// what it refuses, and that the planned graph computes what the traced one
// does (PrimExecutor on CPU tensors: torch's CPU convolutions honour
// channels-last operands as its CUDA ones do).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prims/channels_last.h"
#include "prims/layout.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"
#include "tests/cpp/prims/prim_graph_test_util.h"

namespace kiln::prims {
namespace {

using test::f32;

PrimArg v(int id) { return PrimArg::of_value(id); }

// F.conv2d(x, w, None, 1, 0, 1, groups) as the decomposition keeps it: an
// extern whose result's traced meta is contiguous.
int conv2d(PrimGraph& g, int x, int w, int64_t groups = 1) {
  PrimBuilder b(g);
  const graph::TensorMeta& xm = g.value(x).meta;
  const graph::TensorMeta& wm = g.value(w).meta;
  const graph::TensorMeta out = f32({xm.sizes[0], wm.sizes[0], xm.sizes[2] - wm.sizes[2] + 1,
                                     xm.sizes[3] - wm.sizes[3] + 1});
  test::PyRef fn = test::eval("torch.nn.functional.conv2d");
  test::PyRef one = test::eval("1"), none = test::eval("None"), count = test::eval(std::to_string(groups));
  return b.extern_call(fn.get(), "F.conv2d",
                       {graph::Arg::of_node(x), graph::Arg::of_node(w), graph::Arg::of_constant(none.get()),
                        graph::Arg::of_constant(one.get()), graph::Arg::of_constant(test::eval("0").get()),
                        graph::Arg::of_constant(one.get()), graph::Arg::of_constant(count.get())},
                       {}, {out}, /*pure=*/true, /*fresh=*/true)[0];
}

bool channels_last(const PrimGraph& g, int id) {
  return is_channels_last_contiguous(g.value(id).meta.sizes, g.value(id).meta.strides);
}

TEST(ChannelsLast, ConvolutionsReadChannelsLastAndOutputsKeepTheirLayout) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({2, 3, 8, 8}));
  const int w1 = graph.add_input(f32({4, 3, 3, 3}));
  const int w2 = graph.add_input(f32({5, 4, 3, 3}));
  const int y = b.unary(Prim::Tanh, conv2d(graph, x, w1));
  const int z = conv2d(graph, y, w2);
  graph.set_outputs({b.binary(Prim::Mul, v(z), PrimArg::of_scalar(Scalar::of_float(2)))});
  std::string why;
  const std::optional<ChannelsLastPlan> plan = plan_channels_last(graph, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->convolutions, 2);
  // x, w1 and w2 copied in; the tanh between the convolutions is
  // channels-last already; the output copied back to contiguous.
  EXPECT_EQ(plan->copies, 4);
  for (const PrimNode& node : plan->graph.nodes()) {
    if (node.prim != Prim::Extern) continue;
    EXPECT_TRUE(channels_last(plan->graph, node.attrs.extern_args[0].node));
    EXPECT_TRUE(channels_last(plan->graph, node.attrs.extern_args[1].node));
    EXPECT_TRUE(channels_last(plan->graph, node.outputs[0]));
  }
  kiln::test::expect_same_results(graph, plan->graph,
                            {"torch.randn(2, 3, 8, 8)", "torch.randn(4, 3, 3, 3)", "torch.randn(5, 4, 3, 3)"},
                            /*exact=*/false);
}

TEST(ChannelsLast, OtherCallsReadTheirTracedLayoutsAndRedundantCopiesGo) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({2, 3, 8, 8}));
  const int w = graph.add_input(f32({4, 3, 3, 3}));
  const int c = conv2d(graph, x, w);
  // A decomposition's explicit contiguous copy of a permuted map (a layer
  // norm's rows): contiguous already once the map is channels-last.
  const int rows = b.clone(b.permute(c, {0, 2, 3, 1}), MemoryFormat::Contiguous);
  test::PyRef pixel_shuffle = test::eval("torch.nn.functional.pixel_shuffle");
  const int pooled = b.extern_call(pixel_shuffle.get(), "F.pixel_shuffle",
                                   {graph::Arg::of_node(c), graph::Arg::of_constant(test::eval("2").get())}, {},
                                   {f32({2, 1, 12, 12})}, /*pure=*/true, /*fresh=*/true)[0];
  graph.set_outputs({b.unary(Prim::Abs, rows), pooled});
  std::string why;
  const std::optional<ChannelsLastPlan> plan = plan_channels_last(graph, &why);
  ASSERT_TRUE(plan) << why;
  // x and w in, and the torch call's input back to contiguous; the rows'
  // copy is dropped.
  EXPECT_EQ(plan->copies, 3);
  EXPECT_EQ(kiln::test::count_prims(plan->graph, Prim::Clone), 3);
  const PrimNode& pool_node = plan->graph.node(plan->graph.value(plan->graph.outputs()[1]).node);
  const graph::TensorMeta& read = plan->graph.value(pool_node.attrs.extern_args[0].node).meta;
  EXPECT_EQ(read.strides, graph::contiguous_strides(read.sizes));
  kiln::test::expect_same_results(graph, plan->graph, {"torch.randn(2, 3, 8, 8)", "torch.randn(4, 3, 3, 3)"},
                            /*exact=*/false);
}

TEST(ChannelsLast, PoolingsTakeChannelsLastMapsAsTheyAre) {
  // conv -> max pool (with indices) -> conv, an average pool of the result
  // returned: the pools read the channels-last maps without a copy, their
  // results are channels-last, and only the returned value is restored.
  for (const bool indices : {false, true}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(f32({2, 3, 9, 9}));
    const int w = graph.add_input(f32({4, 3, 3, 3}));
    const int w2 = graph.add_input(f32({5, 4, 1, 1}));
    const int c = conv2d(graph, x, w);
    test::PyRef max_pool = test::eval("torch.nn.functional.max_pool2d");
    std::vector<std::pair<std::string, graph::Arg>> kwargs;
    if (indices) kwargs.emplace_back("return_indices", graph::Arg::of_constant(test::eval("True").get()));
    std::vector<graph::TensorMeta> metas = {f32({2, 4, 2, 2})};
    if (indices) {
      graph::TensorMeta index = f32({2, 4, 2, 2});
      index.dtype = graph::DType::Int64;
      metas.push_back(index);
    }
    const std::vector<int> pooled =
        b.extern_call(max_pool.get(), "F.max_pool2d",
                      {graph::Arg::of_node(c), graph::Arg::of_constant(test::eval("3").get())}, kwargs, metas,
                      /*pure=*/true, /*fresh=*/true);
    const int c2 = conv2d(graph, b.unary(Prim::Abs, pooled[0]), w2);
    test::PyRef avg_pool = test::eval("torch.nn.functional.adaptive_avg_pool2d");
    const int averaged =
        b.extern_call(avg_pool.get(), "F.adaptive_avg_pool2d",
                      {graph::Arg::of_node(c2), graph::Arg::of_constant(test::eval("(1, 2)").get())}, {},
                      {f32({2, 5, 1, 2})}, /*pure=*/true, /*fresh=*/true)[0];
    graph.set_outputs(indices ? std::vector<int>{averaged, pooled[1]} : std::vector<int>{averaged});
    std::string why;
    const std::optional<ChannelsLastPlan> plan = plan_channels_last(graph, &why);
    ASSERT_TRUE(plan) << why;
    for (const PrimNode& node : plan->graph.nodes()) {
      if (node.prim != Prim::Extern || node.attrs.target_name == "F.conv2d") continue;
      EXPECT_TRUE(channels_last(plan->graph, node.attrs.extern_args[0].node)) << node.attrs.target_name;
      for (int out : node.outputs) EXPECT_TRUE(channels_last(plan->graph, out)) << node.attrs.target_name;
    }
    // x, w, w2 in; the returned average (and indices) back.
    EXPECT_EQ(plan->copies, indices ? 5 : 4);
    std::vector<std::string> inputs = {"torch.randn(2, 3, 9, 9)", "torch.randn(4, 3, 3, 3)",
                                       "torch.randn(5, 4, 1, 1)"};
    kiln::test::expect_same_results(graph, plan->graph, inputs, /*exact=*/false);
  }
}

TEST(ChannelsLast, GraphsItCannotLayOutAreRefusedWithTheReason) {
  struct Case {
    const char* name;
    const char* reason;
  };
  for (const Case& c : {Case{"grouped", "grouped convolution"}, Case{"view", "view"}, Case{"reshape", "reshape"},
                        Case{"none", "no 2-d convolution"}, Case{"depthwise", ""}}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const std::string name = c.name;
    const int x = graph.add_input(f32({2, 4, 8, 8}));
    const int64_t groups = name == "grouped" ? 2 : name == "depthwise" ? 4 : 1;
    const int w = graph.add_input(f32({4, 4 / groups, 3, 3}));
    if (name == "none") {
      graph.set_outputs({b.unary(Prim::Neg, x)});
    } else {
      const int y = conv2d(graph, x, w, groups);
      // x.view(n, -1) of a channels-last map has no strides; a group norm's
      // reshape to [N, G, C / G * H * W] would copy it.
      graph.set_outputs({name == "view" ? b.view(y, {2, -1}) : name == "reshape" ? b.reshape(y, {2, 2, -1}) : y});
    }
    std::string why;
    const std::optional<ChannelsLastPlan> plan = plan_channels_last(graph, &why);
    SCOPED_TRACE(name);
    if (name == "depthwise") {
      EXPECT_TRUE(plan) << why;  // one input channel per group: channels-last gains
      continue;
    }
    EXPECT_FALSE(plan);
    EXPECT_NE(why.find(c.reason), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace kiln::prims
