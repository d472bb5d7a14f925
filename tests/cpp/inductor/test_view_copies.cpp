// Tests of inductor/view_copies.h (Note [A view per kernel reader]): which
// views are made again per kernel reader, that the scheduler then folds
// every copy into its reader's kernel, and that the rewritten graph
// computes what the original does (PrimExecutor on CPU tensors).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "inductor/schedule.h"
#include "inductor/view_copies.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

prims::PrimArg V(int id) { return prims::PrimArg::of_value(id); }

// The view nodes of `graph` no kernel group of its schedule holds: each
// runs as an executor step.
int views_left_as_steps(const PrimGraph& graph) {
  std::set<int> grouped;
  for (const KernelGroup& group : schedule_kernels(graph)) grouped.insert(group.nodes.begin(), group.nodes.end());
  int steps = 0;
  for (int n = 0; n < static_cast<int>(graph.nodes().size()); ++n) {
    const Prim prim = graph.node(n).prim;
    if ((prim == Prim::Reshape || prim == Prim::Permute) && !grouped.count(n)) ++steps;
  }
  return steps;
}

TEST(ViewCopies, AViewTwoKernelsReadFoldsIntoBoth) {
  // Batch norm's weight as [1, C, 1, 1] in a backward: the input's
  // gradient and the weight's gradient each read it.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 4, 4}));
  const int g = graph.add_input(tensor_meta({2, 3, 4, 4}));
  const int w = graph.add_input(tensor_meta({3}));
  const int wv = b.reshape(w, {1, 3, 1, 1});
  const int grad_x = b.binary(Prim::Mul, V(g), V(wv));
  const int grad_w = b.reduce(Prim::Sum, b.binary(Prim::Mul, V(b.binary(Prim::Mul, V(g), V(x))), V(wv)), {0, 2, 3},
                              false);
  graph.set_outputs({grad_x, grad_w});
  EXPECT_EQ(views_left_as_steps(graph), 1);
  PrimGraph copied;
  ASSERT_TRUE(copy_views_per_kernel_reader(graph, &copied));
  EXPECT_EQ(copied.verify(), "");
  EXPECT_EQ(test::count_prims(copied, Prim::Reshape), 2);
  EXPECT_EQ(views_left_as_steps(copied), 0);
  PrimGraph again;
  EXPECT_FALSE(copy_views_per_kernel_reader(copied, &again));
  test::expect_same_results(graph, copied, {"torch.randn(2, 3, 4, 4)", "torch.randn(2, 3, 4, 4)", "torch.randn(3)"});
}

TEST(ViewCopies, ChainsAreCopiedWholeAndOtherReadersKeepTheOriginal) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({4, 3}));
  const int y = graph.add_input(tensor_meta({4, 3}));
  const int w = graph.add_input(tensor_meta({3}));
  const int m = graph.add_input(tensor_meta({3, 5}));
  const int row = b.permute(b.reshape(w, {3, 1}), {1, 0});  // [1, 3]
  graph.set_outputs({b.binary(Prim::Mul, V(x), V(row)),
                     b.reduce(Prim::Sum, b.binary(Prim::Add, V(y), V(row)), {0}, false),
                     b.matmul(row, m),
                     row});  // an output: this chain's last view is never copied
  PrimGraph unchanged;
  EXPECT_FALSE(copy_views_per_kernel_reader(graph, &unchanged));
  graph.set_outputs({graph.outputs()[0], graph.outputs()[1], graph.outputs()[2]});
  PrimGraph copied;
  ASSERT_TRUE(copy_views_per_kernel_reader(graph, &copied));
  EXPECT_EQ(copied.verify(), "");
  EXPECT_EQ(test::count_prims(copied, Prim::Reshape), 2);
  EXPECT_EQ(test::count_prims(copied, Prim::Permute), 2);
  // The matmul reads the chain the first kernel reads, not the copy.
  for (const auto& node : copied.nodes()) {
    if (node.prim != Prim::Matmul) continue;
    const int read = node.args[0].value;
    int readers = 0;
    for (const auto& other : copied.nodes()) {
      for (const auto& arg : other.args) readers += arg.is_value() && arg.value == read ? 1 : 0;
    }
    EXPECT_EQ(readers, 2);  // the matmul and the multiply
  }
  test::expect_same_results(graph, copied,
                            {"torch.randn(4, 3)", "torch.randn(4, 3)", "torch.randn(3)", "torch.randn(3, 5)"});
}

}  // namespace
}  // namespace kiln::inductor
