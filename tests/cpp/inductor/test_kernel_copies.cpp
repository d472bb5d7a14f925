// Tests of inductor/kernel_copies.h (Note [Kernel copies]): which
// operands torch's CUDA matmul would copy, the clones that replace those
// copies, and that the rewritten graph computes what the original does
// (run by PrimExecutor on CPU tensors; the pass reads only metadata).
#include <gtest/gtest.h>

#include <vector>

#include "inductor/kernel_copies.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using graph::DType;
using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;

graph::TensorMeta meta(std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
  return test::tensor_meta(std::move(sizes), DType::Float32, std::move(strides));
}

TEST(KernelCopies, TorchCopiesUnmergeableBatchesAndMatricesWithoutAUnitStride) {
  const graph::TensorMeta plain = meta({64, 6, 256, 64});
  // q of a [64, 256, 3 * 384] projection, viewed as heads: (b, h) do not merge.
  const graph::TensorMeta q = meta({64, 6, 256, 64}, {256 * 1152, 64, 1152, 1});
  EXPECT_TRUE(matmul_copies_operand(q, plain));
  EXPECT_FALSE(matmul_copies_operand(plain, q));
  // k^T of the same: the matrix is transposed (fine), the batch is not.
  const graph::TensorMeta kt = meta({64, 6, 64, 256}, {256 * 1152, 64, 1, 1152});
  EXPECT_TRUE(matmul_copies_operand(kt, plain));
  // A transposed batch of contiguous matrices, and a transposed 2-d weight: no copy.
  EXPECT_FALSE(matmul_copies_operand(meta({8, 32, 16}, {512, 1, 32}), meta({8, 16, 4})));
  EXPECT_FALSE(matmul_copies_operand(meta({384, 1152}, {1, 384}), meta({16384, 384})));
  // A matrix stepping over every other element: no unit stride.
  EXPECT_TRUE(matmul_copies_operand(meta({32, 16}, {32, 2}), meta({16, 4})));
  // A 2-d operand broadcast against a batch merges (stride 0): no copy.
  EXPECT_FALSE(matmul_copies_operand(meta({16, 8}), q));
  // A size-1 matrix dim: torch's own rule for it varies, so no copy is claimed.
  EXPECT_FALSE(matmul_copies_operand(meta({64, 6, 1, 64}, {256 * 1152, 64, 1152, 1}), plain));
}

// q @ k^T then (scores @ v) as attention makes them from one projection.
PrimGraph attention_products(int* projection_input) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int qkv = graph.add_input(meta({4, 16, 3 * 24}));
  *projection_input = qkv;
  auto head = [&](int64_t start) {
    const int part = b.slice(qkv, 2, start, start + 24, 1);
    return b.permute(b.view(part, {4, 16, 3, 8}), {0, 2, 1, 3});
  };
  const int q = head(0), k = head(24), v = head(48);
  const int scores = b.matmul(q, b.permute(k, {0, 1, 3, 2}));
  graph.set_outputs({b.matmul(scores, v)});
  return graph;
}

TEST(KernelCopies, AttentionOperandsBecomeClonesWithTheSameResult) {
  int input = -1;
  const PrimGraph graph = attention_products(&input);
  PrimGraph copied;
  ASSERT_TRUE(make_copies_explicit(graph, true, &copied));
  EXPECT_EQ(test::count_prims(copied, Prim::Clone), 3);
  EXPECT_EQ(test::count_prims(copied, Prim::Matmul), 2);
  for (const auto& node : copied.nodes()) {
    if (node.prim != Prim::Matmul) continue;
    const graph::TensorMeta& a = copied.value(node.args[0].value).meta;
    const graph::TensorMeta& b = copied.value(node.args[1].value).meta;
    EXPECT_FALSE(matmul_copies_operand(a, b));
    EXPECT_FALSE(matmul_copies_operand(b, a));
  }
  // k^T is cloned as k (its unit-stride dim stays innermost), then transposed.
  for (const auto& node : copied.nodes()) {
    if (node.prim != Prim::Clone) continue;
    const graph::TensorMeta& in = copied.value(node.args[0].value).meta;
    EXPECT_EQ(in.strides.back(), 1) << "a clone reads along a strided dim";
  }
  PrimGraph again;
  EXPECT_FALSE(make_copies_explicit(copied, true, &again));
  test::expect_same_results(graph, copied, {"torch.randn(4, 16, 72)"});
}

TEST(KernelCopies, ReshapesThatCannotViewBecomeAContiguousCloneAndAView) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int heads = graph.add_input(meta({4, 3, 16, 8}));
  const int merged = b.reshape(b.permute(heads, {0, 2, 1, 3}), {4, 16, 24});  // copies
  const int flat = b.reshape(heads, {12, 128});                                // views
  graph.set_outputs({merged, flat});
  PrimGraph copied;
  ASSERT_TRUE(make_copies_explicit(graph, true, &copied));
  EXPECT_EQ(test::count_prims(copied, Prim::Clone), 1);
  PrimGraph again;
  EXPECT_FALSE(make_copies_explicit(copied, true, &again));
  test::expect_same_results(graph, copied, {"torch.randn(4, 3, 16, 8)"});
}

TEST(KernelCopies, OperandsTorchTakesAsTheyAreStay) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({8, 32, 16}));
  const int w = graph.add_input(meta({4, 16}));
  const int y = b.matmul(x, b.permute(w, {1, 0}));      // linear: a transposed weight
  const int g = b.matmul(b.permute(x, {0, 2, 1}), x);   // a batch of transposed matrices
  // A broadcast batch that no layout of x can merge: a copy would not help.
  const int e = b.matmul(graph.add_input(meta({1, 3, 16, 16})), graph.add_input(meta({5, 3, 16, 2})));
  graph.set_outputs({y, g, e});
  PrimGraph copied;
  EXPECT_FALSE(make_copies_explicit(graph, true, &copied));
}

}  // namespace
}  // namespace kiln::inductor
