// Tests of inductor/bias_epilogues.h (Note [Bias epilogues]): which bias
// adds fold into their matmul, the graph they become, and that it computes
// what the original does (PrimExecutor on CPU tensors; the pass reads only
// metadata).
#include <gtest/gtest.h>

#include <vector>

#include "inductor/bias_epilogues.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

prims::PrimArg V(int id) { return prims::PrimArg::of_value(id); }

TEST(BiasEpilogues, LinearLayersFoldOnEitherSideOfTheAdd) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 4}));
  const int w = graph.add_input(tensor_meta({5, 4}));
  const int bias = graph.add_input(tensor_meta({5}));
  const int x2 = graph.add_input(tensor_meta({6, 4}));
  const int wt = graph.add_input(tensor_meta({4, 5}));
  const int first = b.binary(Prim::Add, V(b.matmul(x, b.permute(w, {1, 0}))), V(bias));
  // A bias on the left; a 2-D input and a row-major right operand.
  const int second = b.binary(Prim::Add, V(bias), V(b.matmul(x2, wt)));
  graph.set_outputs({b.unary(Prim::Tanh, first), second});
  PrimGraph folded;
  ASSERT_TRUE(fold_bias_into_matmuls(graph, &folded));
  EXPECT_EQ(test::count_prims(folded, Prim::Matmul), 0);
  EXPECT_EQ(test::count_prims(folded, Prim::Add), 0);
  EXPECT_EQ(test::count_prims(folded, Prim::Extern), 2);
  for (const auto& node : folded.nodes()) {
    if (node.prim != Prim::Extern) continue;
    EXPECT_EQ(node.attrs.target_name, "linear");
    EXPECT_TRUE(node.attrs.extern_pure);
  }
  // Pure calls order nothing around them (Note [Extern writes]).
  EXPECT_TRUE(extern_order_edges(folded).empty());
  PrimGraph again;
  EXPECT_FALSE(fold_bias_into_matmuls(folded, &again));
  test::expect_same_results(graph, folded,
                            {"torch.randn(2, 3, 4)", "torch.randn(5, 4)", "torch.randn(5)", "torch.randn(6, 4)",
                             "torch.randn(4, 5)"},
                            /*exact=*/false);
}

TEST(BiasEpilogues, OtherAddsAndSharedProductsStay) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({3, 4}));
  const int w = graph.add_input(tensor_meta({4, 5}));
  const int row = graph.add_input(tensor_meta({3, 1}));
  const int full = graph.add_input(tensor_meta({3, 5}));
  const int half = graph.add_input(tensor_meta({5}, graph::DType::Float16));
  const int batched = graph.add_input(tensor_meta({2, 4, 5}));
  const int shared = b.matmul(x, w);
  graph.set_outputs({
      b.binary(Prim::Add, V(shared), V(full)),            // not a vector
      b.binary(Prim::Mul, V(shared), V(full)),            // the product is read twice
      b.binary(Prim::Add, V(b.matmul(x, w)), V(row)),     // a column, not a row vector
      b.binary(Prim::Add, V(b.matmul(x, w)), V(half)),    // another dtype (promotes)
      b.binary(Prim::Add, V(b.matmul(x, batched)), V(b.reduce(Prim::Sum, full, {0}, false))),  // 3-D right operand
      b.binary(Prim::Sub, V(b.matmul(x, w)), V(b.reduce(Prim::Sum, full, {0}, false))),        // not an add
  });
  PrimGraph folded;
  EXPECT_FALSE(fold_bias_into_matmuls(graph, &folded));
}

TEST(BiasEpilogues, MatmulsOfTransposedWeightsBecomeLinearCalls) {
  // Note [Linear without a bias]: matmul(x, w^T) is linear(x, w), its
  // permute dropped with its last reader; other right operands stay.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 4}));
  const int w = graph.add_input(tensor_meta({5, 4}));
  const int y = graph.add_input(tensor_meta({4, 3}));
  const int plain = graph.add_input(tensor_meta({5, 6}));
  const int projected = b.matmul(x, b.permute(w, {1, 0}));                        // [2, 3, 5]
  const int columns = graph.add_input(tensor_meta({4, 2}));
  const int other = b.matmul(b.permute(y, {1, 0}), columns);  // transposed on the left only
  graph.set_outputs({b.matmul(projected, plain), other});
  PrimGraph folded;
  ASSERT_TRUE(fold_transposes_into_linear_calls(graph, &folded));
  EXPECT_EQ(folded.verify(), "");
  EXPECT_EQ(test::count_prims(folded, Prim::Extern), 1);
  EXPECT_EQ(test::count_prims(folded, Prim::Matmul), 2);
  for (const auto& node : folded.nodes()) {
    if (node.prim != Prim::Extern) continue;
    EXPECT_EQ(node.attrs.target_name, "linear");
    ASSERT_EQ(node.attrs.extern_args.size(), 2u);
    EXPECT_EQ(node.attrs.extern_args[1].node, w);
  }
  PrimGraph again;
  EXPECT_FALSE(fold_transposes_into_linear_calls(folded, &again));
  test::expect_same_results(graph, folded, {"torch.randn(2, 3, 4)", "torch.randn(5, 4)", "torch.randn(4, 3)",
                                            "torch.randn(5, 6)", "torch.randn(4, 2)"},
                            /*exact=*/false);
}

}  // namespace
}  // namespace kiln::inductor
