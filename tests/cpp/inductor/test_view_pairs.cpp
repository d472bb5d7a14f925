// Tests of inductor/view_pairs.h (Note [View pairs]): which views of views
// fold, the graph they become, and that it computes what the original does
// (PrimExecutor on CPU tensors; the pass reads only metadata).
#include <gtest/gtest.h>

#include "inductor/view_pairs.h"
#include "prims/prim_builder.h"
#include "prims/subgraph.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

// The graph after fold_view_pairs and dead-node dropping, to a fixed point.
PrimGraph folded(const PrimGraph& graph) {
  PrimGraph current = graph;
  for (;;) {
    PrimGraph next;
    if (fold_view_pairs(current, &next) || prims::drop_dead_nodes(current, &next)) {
      current = std::move(next);
    } else {
      return current;
    }
  }
}

TEST(ViewPairs, APermuteUndoingAPermuteLeavesTheInput) {
  // A matmul's gradient reads its weight transposed back: no view remains.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int g = graph.add_input(tensor_meta({2, 5}));
  const int w = graph.add_input(tensor_meta({5, 4}));
  const int wt = b.permute(w, {1, 0});
  graph.set_outputs({b.matmul(g, b.permute(wt, {1, 0}))});
  const PrimGraph after = folded(graph);
  EXPECT_EQ(test::count_prims(after, Prim::Permute), 0);
  EXPECT_EQ(test::count_prims(after, Prim::Matmul), 1);
  test::expect_same_results(graph, after, {"torch.randn(2, 5)", "torch.randn(5, 4)"});
}

TEST(ViewPairs, PermutesComposeAndAnOutputKeepsItsNode) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 4}));
  const int once = b.permute(x, {2, 0, 1});
  const int composed = b.permute(once, {0, 2, 1});  // one permute of x: dims (2, 1, 0)
  const int undone = b.permute(b.permute(x, {1, 0, 2}), {1, 0, 2});  // x itself, but a graph output
  graph.set_outputs({b.matmul(composed, b.permute(x, {2, 0, 1})), undone});
  const PrimGraph after = folded(graph);
  // composed: one permute; x's permute for the matmul; the output's own node.
  EXPECT_EQ(test::count_prims(after, Prim::Permute), 3);
  for (const auto& node : after.nodes()) {
    if (node.prim == Prim::Permute) EXPECT_TRUE(node.args[0].is_value() && node.args[0].value == x);
  }
  test::expect_same_results(graph, after, {"torch.randn(2, 3, 4)"});
}

TEST(ViewPairs, AnOutputUndoingAPermuteOfAComputedValueIsThatValue) {
  // A weight's gradient: the matmul computed it transposed, and the output
  // transposes it back. The graph returns the matmul's result; a second
  // output undoing the same value, and one undoing an input, keep a node.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int g = graph.add_input(tensor_meta({2, 5}));
  const int x = graph.add_input(tensor_meta({2, 4}));
  const int product = b.matmul(b.permute(x, {1, 0}), g);  // [4, 5]
  const int grad = b.permute(b.permute(product, {1, 0}), {1, 0});
  const int again = b.permute(b.permute(product, {1, 0}), {1, 0});
  const int input_back = b.permute(b.permute(g, {1, 0}), {1, 0});
  graph.set_outputs({grad, again, input_back});
  const PrimGraph after = folded(graph);
  ASSERT_EQ(after.outputs().size(), 3u);
  EXPECT_EQ(after.node(after.value(after.outputs()[0]).node).prim, Prim::Matmul);
  EXPECT_EQ(after.node(after.value(after.outputs()[1]).node).prim, Prim::Permute);
  EXPECT_EQ(after.node(after.value(after.outputs()[2]).node).prim, Prim::Permute);
  test::expect_same_results(graph, after, {"torch.randn(2, 5)", "torch.randn(2, 4)"});
}

TEST(ViewPairs, ReshapesOfViewsFoldOnlyIntoTheSameView) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 4, 3, 8}));
  const int w = graph.add_input(tensor_meta({24, 5}));
  // Attention's output flattened for its projection: a view of a view.
  const int heads = b.permute(x, {0, 2, 1, 3});  // [2, 3, 4, 8], strides of a transpose
  const int merged = b.reshape(b.permute(heads, {0, 2, 1, 3}), {2, 4, 24});
  const int rows = b.reshape(merged, {8, 24});
  // A reshape that copies (of the transposed heads) stays, with its reader.
  const int copied = b.reshape(b.reshape(heads, {2, 3, 32}), {6, 32});
  graph.set_outputs({b.matmul(rows, w), copied});
  const PrimGraph after = folded(graph);
  EXPECT_EQ(test::count_prims(after, Prim::Reshape), 3);
  test::expect_same_results(graph, after, {"torch.randn(2, 4, 3, 8)", "torch.randn(24, 5)"});
  PrimGraph again;
  EXPECT_FALSE(fold_view_pairs(after, &again));
}

}  // namespace
}  // namespace kiln::inductor
