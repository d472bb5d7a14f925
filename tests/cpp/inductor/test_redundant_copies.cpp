// Tests of inductor/redundant_copies.h (Note [Copies undone by permutes]):
// which copy-permute-copy chains become a view of the first copy's input,
// and that the rewritten graph computes what the original does
// (PrimExecutor on CPU tensors).
#include <gtest/gtest.h>

#include "inductor/redundant_copies.h"
#include "prims/prim_builder.h"
#include "prims/subgraph.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using prims::MemoryFormat;
using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

// An attention-like output: [B, H, T, D] laid out as [B, T, H, D] (here a
// transpose of a computed value), copied contiguous, transposed back and
// copied contiguous again, then flattened into a matmul. `returned`: the
// flattened value is also a graph output; `from_input`: the source is the
// third graph input.
PrimGraph attention_output_chain(bool returned, bool from_input) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int a = graph.add_input(tensor_meta({2, 3, 4, 5}));
  const int w = graph.add_input(tensor_meta({20, 3}));
  const int source = from_input ? graph.add_input(tensor_meta({2, 4, 3, 5}, graph::DType::Float32, {60, 5, 20, 1}))
                                : b.permute(b.unary(Prim::Exp, a), {0, 2, 1, 3});
  const int first = b.clone(source, MemoryFormat::Contiguous);
  const int second = b.clone(b.permute(first, {0, 2, 1, 3}), MemoryFormat::Contiguous);
  const int flat = b.reshape(second, {6, 20});
  std::vector<int> outputs = {b.matmul(flat, w)};
  if (returned) outputs.push_back(flat);
  graph.set_outputs(outputs);
  return graph;
}

TEST(RedundantCopies, ACopyTheTransposeUndoesIsAView) {
  const PrimGraph graph = attention_output_chain(/*returned=*/false, /*from_input=*/false);
  PrimGraph dropped;
  ASSERT_TRUE(drop_copies_undone_by_permutes(graph, &dropped));
  EXPECT_EQ(dropped.verify(), "");
  // The second clone is gone; the first is left unread for drop_dead_nodes.
  EXPECT_EQ(test::count_prims(dropped, Prim::Clone), 1);
  PrimGraph live;
  ASSERT_TRUE(prims::drop_dead_nodes(dropped, &live));
  EXPECT_EQ(test::count_prims(live, Prim::Clone), 0);
  PrimGraph again;
  EXPECT_FALSE(drop_copies_undone_by_permutes(live, &again));
  test::expect_same_results(graph, live, {"torch.randn(2, 3, 4, 5)", "torch.randn(20, 3)"});
}

TEST(RedundantCopies, CopiesStayWhereAViewWouldBeSeen) {
  PrimGraph dropped;
  // The flattened result is returned: it would share the source's storage.
  EXPECT_FALSE(drop_copies_undone_by_permutes(attention_output_chain(true, false), &dropped));
  // An extern writes the source in place after the chain read it.
  PrimGraph written = attention_output_chain(false, true);
  PrimBuilder b(written);
  const int source = written.inputs()[2];
  b.extern_call(Py_None, "Tensor.add_", {graph::Arg::of_node(source)}, {}, {written.value(source).meta});
  EXPECT_FALSE(drop_copies_undone_by_permutes(written, &dropped));
}

TEST(RedundantCopies, AnInputTheBackwardRecomputesFromIsViewed) {
  // A backward recomputing the chain reads the saved attention output as
  // an input.
  const PrimGraph graph = attention_output_chain(/*returned=*/false, /*from_input=*/true);
  PrimGraph dropped;
  ASSERT_TRUE(drop_copies_undone_by_permutes(graph, &dropped));
  test::expect_same_results(graph, dropped,
                            {"torch.randn(2, 3, 4, 5)", "torch.randn(20, 3)",
                             "torch.randn(2, 3, 4, 5).permute(0, 2, 1, 3)"});
}

}  // namespace
}  // namespace kiln::inductor
