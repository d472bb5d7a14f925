// Tests of memory planning for fused graphs (inductor/buffer_plan.h): which
// kernel outputs may write into a dead kernel output's buffer.
#include <gtest/gtest.h>

#include <vector>

#include "inductor/buffer_plan.h"
#include "prims/prim_builder.h"

#include "tests/cpp/test_metas.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimBuilder;
using prims::PrimGraph;

using test::f32;
using test::f64;

PlanUnit kernel(std::vector<int> reads, std::vector<int> outputs) {
  return PlanUnit{std::move(reads), std::move(outputs), true, false};
}

PlanUnit node(std::vector<int> reads, std::vector<int> outputs, bool aliases = false) {
  return PlanUnit{std::move(reads), std::move(outputs), false, aliases};
}

// x -> k0 -> a -> matmul -> m -> k1 -> c -> matmul -> n -> k2 -> d: values
// of one shape made by the builder (the plan reads only their metas).
struct Chain {
  PrimGraph graph;
  int x, a, m, c, n, d;
  explicit Chain(graph::TensorMeta meta) {
    PrimBuilder b(graph);
    x = graph.add_input(meta);
    a = b.unary(Prim::Exp, x);
    m = b.matmul(a, a);
    c = b.unary(Prim::Exp, m);
    n = b.matmul(c, c);
    d = b.unary(Prim::Exp, n);
  }
};

TEST(BufferPlan, AKernelOutputTakesTheBufferOfOneDeadBeforeIt) {
  Chain g(f32({16, 16}));
  g.graph.set_outputs({g.d});
  const auto plan = plan_buffer_reuse(g.graph, {kernel({g.x}, {g.a}), node({g.a}, {g.m}), kernel({g.m}, {g.c}),
                                                node({g.c}, {g.n}), kernel({g.n}, {g.d})});
  EXPECT_EQ(plan[0], std::vector<int>{-1});
  EXPECT_EQ(plan[2], std::vector<int>{g.a});  // a died at the matmul
  EXPECT_EQ(plan[4], std::vector<int>{g.c});  // c did too; a's buffer went to c
}

TEST(BufferPlan, NeverTheBufferOfAValueItReadsOrAGraphOutput) {
  Chain g(f32({16, 16}));
  g.graph.set_outputs({g.a, g.d});
  // k1 also reads a; a is a graph output besides.
  const auto plan = plan_buffer_reuse(g.graph, {kernel({g.x}, {g.a}), node({g.a}, {g.m}), kernel({g.m, g.a}, {g.c}),
                                                node({g.c}, {g.n}), kernel({g.n}, {g.d})});
  EXPECT_EQ(plan[2], std::vector<int>{-1});
  EXPECT_EQ(plan[4], std::vector<int>{g.c});
}

TEST(BufferPlan, ABufferLivesAsLongAsAnyValueThatMayShareIt) {
  Chain g(f32({16, 16}));
  PrimBuilder b(g.graph);
  const int view = b.view(g.a, {256});
  g.graph.set_outputs({g.d});
  // A view of a is read by the last kernel: a's buffer stays taken.
  auto plan = plan_buffer_reuse(g.graph, {kernel({g.x}, {g.a}), node({g.a}, {view}, true), node({g.a}, {g.m}),
                                          kernel({g.m}, {g.c}), node({g.c}, {g.n}), kernel({g.n, view}, {g.d})});
  EXPECT_EQ(plan[3], std::vector<int>{-1});
  EXPECT_EQ(plan[5], std::vector<int>{g.c});
  // A view that is a graph output keeps it forever.
  g.graph.set_outputs({g.d, view});
  plan = plan_buffer_reuse(g.graph, {kernel({g.x}, {g.a}), node({g.a}, {view}, true), node({g.a}, {g.m}),
                                     kernel({g.m}, {g.c}), node({g.c}, {g.n}), kernel({g.n}, {g.d})});
  EXPECT_EQ(plan[3], std::vector<int>{-1});
  EXPECT_EQ(plan[5], std::vector<int>{g.c});
}

TEST(BufferPlan, SizesMustFitWithinTwiceTheNeed) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({1024}));
  const int big = b.unary(Prim::Exp, x);                                       // 4 KiB
  const int small = b.unary(Prim::Exp, b.view(x, {1, 1024}));                  // 4 KiB
  const int tiny_in = graph.add_input(f32({100}));
  const int tiny = b.unary(Prim::Exp, tiny_in);                                // 400 B
  const int wide_in = graph.add_input(f64({1024}));
  const int wide = b.unary(Prim::Exp, wide_in);                                // 8 KiB
  graph.set_outputs({tiny, wide, small});
  // big dies after step 0; tiny (400 B) must not take 4 KiB, wide (8 KiB)
  // cannot fit in it, small (4 KiB, another dtype would do too) takes it.
  const auto plan = plan_buffer_reuse(graph, {kernel({x}, {big}), node({big}, {}), kernel({tiny_in}, {tiny}),
                                              kernel({wide_in}, {wide}), kernel({x}, {small})});
  EXPECT_EQ(plan[2], std::vector<int>{-1});
  EXPECT_EQ(plan[3], std::vector<int>{-1});
  EXPECT_EQ(plan[4], std::vector<int>{big});
}

TEST(BufferPlan, SpanBytesFollowStrides) {
  graph::TensorMeta meta = f32({4, 8});
  EXPECT_EQ(tensor_span_bytes(meta), 128);
  meta.strides = {1, 4};  // transposed
  EXPECT_EQ(tensor_span_bytes(meta), 128);
  meta.strides = {0, 1};  // broadcast rows
  EXPECT_EQ(tensor_span_bytes(meta), 32);
  meta.sizes = {0, 8};
  EXPECT_EQ(tensor_span_bytes(meta), 0);
}

}  // namespace
}  // namespace kiln::inductor
