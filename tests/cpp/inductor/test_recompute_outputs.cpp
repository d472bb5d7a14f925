// Tests of inductor/recompute_outputs.h (Note [Recomputed kernel
// outputs]): which kernel outputs the reading kernel recomputes, what
// schedule follows, and that the rewritten graph computes the same bits
// (run by PrimExecutor on CPU tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "inductor/fuse_kernels.h"
#include "inductor/recompute_outputs.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"
#include "tests/cpp/inductor/graph_pass_test_util.h"

namespace kiln::inductor {
namespace {

using graph::DType;
using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;

graph::TensorMeta meta(std::vector<int64_t> sizes, DType dtype) { return test::tensor_meta(std::move(sizes), dtype); }

PrimArg v(int value) { return PrimArg::of_value(value); }

// Kernel outputs that are no graph outputs: what the kernels store for each other.
size_t stored_between_kernels(const PrimGraph& graph) {
  size_t n = 0;
  for (const KernelGroup& group : schedule_kernels(graph)) {
    for (int value : group.outputs) {
      n += std::find(graph.outputs().begin(), graph.outputs().end(), value) == graph.outputs().end();
    }
  }
  return n;
}

// A layer_norm backward's shape: a row reduction and a column reduction
// of the same bfloat16 gradient converted to float32.
TEST(RecomputeOutputs, AConversionTwoReductionsNeedIsComputedInBothKernels) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({64, 48}, DType::Float32));
  const int g = graph.add_input(meta({64, 48}, DType::BFloat16));
  const int w = graph.add_input(meta({48}, DType::Float32));
  const int gf = b.convert(g, DType::Float32);
  const int scaled = b.binary(Prim::Mul, v(gf), v(w));
  const int rows = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(scaled), v(x)), {1}, true);
  const int dx = b.binary(Prim::Sub, v(scaled), v(rows));
  const int columns = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(gf), v(x)), {0}, false);
  graph.set_outputs({dx, columns});
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_GE(stored_between_kernels(graph), 1u);
  PrimGraph rewritten;
  ASSERT_TRUE(recompute_kernel_outputs(graph, groups, &rewritten));
  EXPECT_EQ(stored_between_kernels(rewritten), 0u);
  EXPECT_EQ(schedule_kernels(rewritten).size(), 2u);
  PrimGraph again;
  EXPECT_FALSE(recompute_kernel_outputs(rewritten, schedule_kernels(rewritten), &again));
  test::expect_same_results(graph, rewritten,
                      {"torch.randn(64, 48)", "torch.randn(64, 48).bfloat16()", "torch.randn(48)"});
}

TEST(RecomputeOutputs, CostlyConesAndValuesReadOutsideKernelsStayStored) {
  for (const bool costly : {true, false}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(meta({64, 48}, DType::Float32));
    // exp over the whole tensor is worth storing; a value a matmul reads must be stored.
    const int shared = costly ? b.unary(Prim::Exp, x) : b.binary(Prim::Mul, v(x), v(x));
    const int rows = b.reduce(Prim::Sum, shared, {1}, false);
    const int columns = b.reduce(Prim::Sum, b.binary(Prim::Add, v(shared), v(x)), {0}, false);
    std::vector<int> outputs = {rows, columns};
    if (!costly) outputs.push_back(b.matmul(shared, b.permute(x, {1, 0})));
    graph.set_outputs(outputs);
    PrimGraph rewritten;
    EXPECT_FALSE(recompute_kernel_outputs(graph, schedule_kernels(graph), &rewritten)) << costly;
  }
}

// Swin's window reverse: a residual sum, cut into windows, permuted back and
// copied; a layer norm's row kernel reads the copy. The row kernel reads
// the copy's merged dims by digits (Note [Reshapes in kernels]), so nothing
// is stored between the kernels and no recompute round runs (before, the
// copy was a kernel of its own and a round that could not move it into
// the row kernel had to be undone).
TEST(RecomputeOutputs, SwinsWindowReverseIsReadByTheRowKernel) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(meta({2, 4, 4, 8}, DType::Float32));
  const int y = graph.add_input(meta({2, 4, 4, 8}, DType::Float32));
  const int sum = b.binary(Prim::Add, v(x), v(y));
  const int windows = b.permute(b.view(sum, {2, 2, 2, 2, 2, 8}), {0, 1, 3, 2, 4, 5});
  const int copy = b.clone(windows, prims::MemoryFormat::Contiguous);
  const int tokens = b.reshape(copy, {2, 16, 8});
  const int rows = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(tokens), v(tokens)), {2}, true);
  graph.set_outputs({sum, b.binary(Prim::Div, v(tokens), v(rows))});
  EXPECT_EQ(stored_between_kernels(graph), 0u);
  PrimGraph rewritten;
  EXPECT_FALSE(recompute_kernel_outputs(graph, schedule_kernels(graph), &rewritten));
  const KernelPlan plan = plan_kernels(graph, KernelTargets{});
  EXPECT_EQ(plan.schedules, 1);
  test::expect_same_results(graph, plan.graph, {"torch.randn(2, 4, 4, 8)", "torch.randn(2, 4, 4, 8)"});
}

}  // namespace
}  // namespace kiln::inductor
