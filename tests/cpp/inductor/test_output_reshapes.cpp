// Tests of inductor/output_reshapes.h (Note [Kernel outputs in their
// readers' shape]): which reshapes a kernel's output absorbs, the kernel's
// tensor shape after it, and that the emitted graph (kernels compiled by
// LLVM) computes what the prim graph does with no step for the reshape.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "inductor/fuse_kernels.h"
#include "inductor/output_reshapes.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/cpu_test_util.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using test::tensor_meta;

PrimArg v(int value) { return PrimArg::of_value(value); }

// tanh(x) + x over [2, 3, 4], flattened to [6, 4] for a matmul: a layer's
// result feeding a linear layer. `also_output`: the sum is a graph output too.
PrimGraph flattened_for_matmul(bool also_output, int* reshape_value = nullptr) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 4}));
  const int w = graph.add_input(tensor_meta({4, 5}));
  const int sum = b.binary(Prim::Add, v(b.unary(Prim::Tanh, x)), v(x));
  const int rows = b.reshape(sum, {6, 4});
  if (reshape_value != nullptr) *reshape_value = rows;
  const int product = b.matmul(rows, w);
  graph.set_outputs(also_output ? std::vector<int>{product, sum} : std::vector<int>{product});
  return graph;
}

// The graph's kernel groups, lowered, after absorb_output_reshapes, and
// how many views it absorbed.
struct Absorbed {
  std::vector<KernelGroup> groups;
  std::vector<LoweredKernel> lowered;
  int count = 0;
};

Absorbed absorbed_in(const PrimGraph& graph) {
  Absorbed a;
  a.groups = schedule_kernels(graph);
  for (const KernelGroup& group : a.groups) a.lowered.push_back(lower_group(graph, group));
  a.count = absorb_output_reshapes(graph, a.groups, a.lowered);
  return a;
}

TEST(OutputReshapes, AKernelAllocatesItsOutputInItsOnlyReadersShape) {
  int rows = -1;
  const PrimGraph graph = flattened_for_matmul(false, &rows);
  const Absorbed a = absorbed_in(graph);
  ASSERT_EQ(a.groups.size(), 1u);
  ASSERT_EQ(a.count, 1);
  ASSERT_EQ(a.lowered[0].outputs, std::vector<int>{rows});
  const KernelOutput& out = a.lowered[0].kernel.outputs.at(0);
  EXPECT_EQ(out.tensor_sizes, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(out.tensor_strides, (std::vector<int64_t>{4, 1}));
  const int reshape_node = graph.value(rows).node;
  EXPECT_TRUE(std::binary_search(a.groups[0].nodes.begin(), a.groups[0].nodes.end(), reshape_node));
  EXPECT_EQ(a.groups[0].outputs, std::vector<int>{rows});
}

TEST(OutputReshapes, AnOutputWithOtherReadersKeepsItsShape) {
  // The sum is a graph output as well: its tensor must keep [2, 3, 4].
  EXPECT_EQ(absorbed_in(flattened_for_matmul(true)).count, 0);
}

TEST(OutputReshapes, APermuteIsAbsorbedAndAReshapeOfItThatCopiesStays) {
  // tanh(x) transposed, then flattened: the kernel allocates the transpose
  // (the same memory, strides (1, 6)); the reshape of it copies and keeps
  // its step.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({4, 6}));
  const int w = graph.add_input(tensor_meta({4, 5}));
  const int t = b.unary(Prim::Tanh, x);
  const int transposed = b.permute(t, {1, 0});
  graph.set_outputs({b.matmul(b.reshape(b.reshape(transposed, {2, 3, 4}), {6, 4}), w)});
  const Absorbed a = absorbed_in(graph);
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.count, 1);
  ASSERT_EQ(a.lowered[0].outputs, std::vector<int>{transposed});
  EXPECT_EQ(a.lowered[0].kernel.outputs.at(0).tensor_sizes, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(a.lowered[0].kernel.outputs.at(0).tensor_strides, (std::vector<int64_t>{1, 6}));
}

// The graph through the kernel passes (CPU kernels, torch's matmul).
FusedGraph fused_graph(const PrimGraph& graph) {
  KernelTargets targets;
  targets.cpu_matmul = MatmulPolicy::Aten;
  KernelPlan plan = plan_kernels(graph, targets);
  const std::vector<LoweredKernel> lowered = lower_kernels(&plan);
  return emit_kernel_graph(plan, lowered, compile_kernels(plan, lowered));
}

TEST(OutputReshapes, TheEmittedGraphHasNoStepForTheReshape) {
  KILN_REQUIRE_LLVM();
  const PrimGraph graph = flattened_for_matmul(false);
  const FusedGraph fused = fused_graph(graph);
  ASSERT_EQ(fused.kernels, 1);
  EXPECT_EQ(test::count_prims(*fused.graph, Prim::Reshape), 0);
  EXPECT_EQ(test::count_prims(*fused.graph, Prim::Extern) + test::count_prims(*fused.graph, Prim::Matmul),
            static_cast<int>(fused.graph->nodes().size()));
  test::expect_same_results(graph, *fused.graph, {"torch.randn(2, 3, 4)", "torch.randn(4, 5)"});
}

TEST(OutputReshapes, ATransposedKernelOutputComputesTheSameProduct) {
  KILN_REQUIRE_LLVM();
  // bfloat16 weights for a matmul: converted by a kernel, transposed by the
  // permute the kernel now allocates.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({3, 6}));
  const int w = graph.add_input(tensor_meta({5, 6}));
  const int weight = b.convert(w, graph::DType::BFloat16);
  graph.set_outputs({b.matmul(b.convert(x, graph::DType::BFloat16), b.permute(weight, {1, 0}))});
  const FusedGraph fused = fused_graph(graph);
  EXPECT_EQ(test::count_prims(*fused.graph, Prim::Permute), 0);
  test::expect_same_results(graph, *fused.graph, {"torch.randn(3, 6)", "torch.randn(5, 6)"});
}

TEST(OutputReshapes, AChainOfViewsIsAbsorbedOneAfterAnother) {
  KILN_REQUIRE_LLVM();
  // A projection's bias add split into heads for attention: reshape, then
  // permute; the kernel allocates the heads' view and no view step is left.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(tensor_meta({2, 3, 8}));
  const int bias = graph.add_input(tensor_meta({8}));
  const int w = graph.add_input(tensor_meta({2, 4, 5}));
  const int sum = b.binary(Prim::Add, v(x), v(bias));
  const int heads = b.permute(b.reshape(sum, {2, 3, 2, 4}), {0, 2, 1, 3});  // [2, 2, 3, 4]
  graph.set_outputs({b.matmul(heads, w)});
  const FusedGraph fused = fused_graph(graph);
  EXPECT_EQ(test::count_prims(*fused.graph, Prim::Permute) + test::count_prims(*fused.graph, Prim::Reshape), 0);
  test::expect_same_results(graph, *fused.graph, {"torch.randn(2, 3, 8)", "torch.randn(8)", "torch.randn(2, 4, 5)"});
}

}  // namespace
}  // namespace kiln::inductor
