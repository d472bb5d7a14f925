// Tests of inductor/batched_casts.h (Note [Batched weight casts]): which
// casts of graph inputs join one foreach copy, and that the rewritten graph
// computes what the original does (PrimExecutor on CPU tensors; the pass
// reads only metadata).
#include <gtest/gtest.h>

#include <vector>

#include "inductor/batched_casts.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using graph::DType;
using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

prims::PrimArg V(int id) { return prims::PrimArg::of_value(id); }

// The cast_all calls of `graph`: per call, its number of tensor arguments.
std::vector<size_t> batch_sizes(const PrimGraph& graph) {
  std::vector<size_t> sizes;
  for (const auto& node : graph.nodes()) {
    if (node.prim != Prim::Extern || node.attrs.target_name != "kiln.cast_all") continue;
    EXPECT_TRUE(node.attrs.extern_pure);
    sizes.push_back(node.attrs.extern_args.size() - 1);  // after the dtype
  }
  return sizes;
}

TEST(BatchedCasts, WeightCastsReadByMatmulsAndOutputsRunAsOneCall) {
  // An autocast MLP's forward: each weight cast to bfloat16, one read
  // through a transpose, the other also returned (saved for a backward).
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({3, 4}));
  const int w1 = graph.add_input(tensor_meta({5, 4}));
  const int w2 = graph.add_input(tensor_meta({5, 6}));
  const int w1b = b.convert(w1, DType::BFloat16);
  const int h = b.matmul(b.convert(x, DType::BFloat16), b.permute(w1b, {1, 0}));
  const int w2b = b.convert(w2, DType::BFloat16);
  graph.set_outputs({b.matmul(h, w2b), w2b});
  PrimGraph batched;
  ASSERT_TRUE(batch_input_casts(graph, &batched));
  EXPECT_EQ(batched.verify(), "");
  EXPECT_EQ(batch_sizes(batched), std::vector<size_t>{3});
  EXPECT_EQ(test::count_prims(batched, Prim::ConvertElementType), 0);
  PrimGraph again;
  EXPECT_FALSE(batch_input_casts(batched, &again));
  test::expect_same_results(graph, batched, {"torch.randn(3, 4)", "torch.randn(5, 4)", "torch.randn(5, 6)"});
}

TEST(BatchedCasts, CastsThatFuseOrCannotMoveStay) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int fused = graph.add_input(tensor_meta({4, 4}));
  const int computed = graph.add_input(tensor_meta({4, 4}));
  const int transposed = graph.add_input(tensor_meta({4, 4}, DType::Float32, {1, 4}));
  const int written = graph.add_input(tensor_meta({4, 4}));
  const int lone = graph.add_input(tensor_meta({4, 4}));
  const int other = graph.add_input(tensor_meta({4, 4}));
  const int right = graph.add_input(tensor_meta({4, 4}, DType::BFloat16));
  const int weight = graph.add_input(tensor_meta({4, 4}));
  // The one cast of its pair that qualifies: any other that wrongly did
  // would make a batch of two.
  const int good = b.convert(weight, DType::BFloat16);
  // A pointwise reader: the cast fuses into its kernel.
  const int scaled = b.binary(Prim::Mul, V(b.convert(fused, DType::BFloat16)), V(right));
  // Not a graph input.
  const int from_exp = b.convert(b.unary(Prim::Exp, computed), DType::BFloat16);
  // Not contiguous.
  const int from_transposed = b.convert(transposed, DType::BFloat16);
  // An extern writes the input afterwards: the cast must read it first.
  const int from_written = b.convert(written, DType::BFloat16);
  b.extern_call(Py_None, "Tensor.add_", {graph::Arg::of_node(written)}, {}, {tensor_meta({4, 4})});
  // The only cast of its dtype pair.
  const int half = b.convert(lone, DType::Float16);
  const int to_double = b.convert(other, DType::Float64);
  graph.set_outputs({b.matmul(scaled, from_exp), b.matmul(from_transposed, from_written), b.matmul(good, right), half,
                     to_double});
  PrimGraph batched;
  EXPECT_FALSE(batch_input_casts(graph, &batched));
}

TEST(BatchedCasts, EachDtypePairIsItsOwnCall) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int a = graph.add_input(tensor_meta({2, 3}));
  const int c = graph.add_input(tensor_meta({3, 2}));
  const int d = graph.add_input(tensor_meta({2, 3}, DType::BFloat16));
  const int e = graph.add_input(tensor_meta({3, 2}, DType::BFloat16));
  const int f = graph.add_input(tensor_meta({2, 2}));
  graph.set_outputs({b.matmul(b.convert(a, DType::BFloat16), b.convert(c, DType::BFloat16)),
                     b.matmul(b.convert(d, DType::Float32), b.convert(e, DType::Float32)),
                     b.convert(f, DType::Float16)});
  PrimGraph batched;
  ASSERT_TRUE(batch_input_casts(graph, &batched));
  EXPECT_EQ(batch_sizes(batched), (std::vector<size_t>{2, 2}));
  EXPECT_EQ(test::count_prims(batched, Prim::ConvertElementType), 1);  // f's, alone in its pair
  test::expect_same_results(graph, batched,
                            {"torch.randn(2, 3)", "torch.randn(3, 2)", "torch.randn(2, 3, dtype=torch.bfloat16)",
                             "torch.randn(3, 2, dtype=torch.bfloat16)", "torch.randn(2, 2)"});
}

}  // namespace
}  // namespace kiln::inductor
