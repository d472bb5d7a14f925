// Tests of inductor/conv_bias.h (Note [Convolution biases in kernels]):
// which convolutions give their bias to the kernels reading them, the graph
// they become, and that it computes what the original does (PrimExecutor on
// CPU tensors; the pass reads only metadata).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "inductor/conv_bias.h"
#include "prims/extern_writes.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"
#include "tests/cpp/prims/prim_graph_test_util.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

PrimArg V(int id) { return PrimArg::of_value(id); }

// F.conv2d(x, w, bias, 1, 1) with a 3x3 kernel (same size out), the bias a
// value or None (-1); `kwarg` passes it as bias=.
int conv2d(PrimGraph& g, int x, int w, int bias, bool kwarg = false) {
  PrimBuilder b(g);
  const graph::TensorMeta& xm = g.value(x).meta;
  const graph::TensorMeta& wm = g.value(w).meta;
  graph::TensorMeta out = xm;
  out.sizes[1] = wm.sizes[0];
  out.strides = tensor_meta(out.sizes).strides;
  test::PyRef fn = test::eval("torch.nn.functional.conv2d");
  test::PyRef none = test::eval("None"), one = test::eval("1");
  const graph::Arg b_arg = bias >= 0 ? graph::Arg::of_node(bias) : graph::Arg::of_constant(none.get());
  std::vector<graph::Arg> args{graph::Arg::of_node(x), graph::Arg::of_node(w)};
  std::vector<std::pair<std::string, graph::Arg>> kwargs;
  if (kwarg) {
    kwargs = {{"bias", b_arg}, {"padding", graph::Arg::of_constant(one.get())}};
  } else {
    args.push_back(b_arg);
    args.push_back(graph::Arg::of_constant(one.get()));
    args.push_back(graph::Arg::of_constant(one.get()));
  }
  return b.extern_call(fn.get(), "F.conv2d", std::move(args), std::move(kwargs), {out}, /*pure=*/true)[0];
}

TEST(ConvBias, BiasesOfConvolutionsThatKernelsReadBecomeAdds) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 6, 6}));
  const int w = graph.add_input(tensor_meta({4, 3, 3, 3}));
  const int bias = graph.add_input(tensor_meta({4}));
  const int w2 = graph.add_input(tensor_meta({4, 4, 3, 3}));
  // A bias as an argument, read by a kernel (tanh) and a convolution; a
  // bias as a keyword, read by a kernel only.
  const int first = conv2d(graph, x, w, bias);
  const int second = conv2d(graph, first, w2, bias, /*kwarg=*/true);
  graph.set_outputs({b.unary(Prim::Tanh, first), b.unary(Prim::Abs, second)});
  PrimGraph moved;
  ASSERT_TRUE(move_conv_biases_into_kernels(graph, &moved));
  EXPECT_EQ(test::count_prims(moved, Prim::Add), 2);
  // The convolutions no longer read the bias; only the adds' views do.
  for (const auto& node : moved.nodes()) {
    if (node.prim != Prim::Extern) continue;
    for (int read : prims::node_reads(node)) EXPECT_NE(read, bias);
  }
  PrimGraph again;
  EXPECT_FALSE(move_conv_biases_into_kernels(moved, &again));
  test::expect_same_results(graph, moved,
                            {"torch.randn(2, 3, 6, 6)", "torch.randn(4, 3, 3, 3)", "torch.randn(4)",
                             "torch.randn(4, 4, 3, 3)"},
                            /*exact=*/false);
}

TEST(ConvBias, ConvolutionsOnlyCallsReadOrWithoutBiasStay) {
  PrimGraph graph;
  const int x = graph.add_input(tensor_meta({2, 3, 6, 6}));
  const int w = graph.add_input(tensor_meta({4, 3, 3, 3}));
  const int bias = graph.add_input(tensor_meta({4}));
  const int w2 = graph.add_input(tensor_meta({4, 4, 3, 3}));
  const int half = graph.add_input(tensor_meta({4}, graph::DType::Float16));
  PrimBuilder b(graph);
  graph.set_outputs({
      conv2d(graph, conv2d(graph, x, w, bias), w2, -1),   // read by a convolution, an output without bias
      b.unary(Prim::Abs, conv2d(graph, x, w, -1)),        // no bias
      b.unary(Prim::Abs, conv2d(graph, x, w, half)),      // a bias of another dtype
  });
  PrimGraph moved;
  EXPECT_FALSE(move_conv_biases_into_kernels(graph, &moved));
}

}  // namespace
}  // namespace kiln::inductor
