// Tests of the fusion scheduler (inductor/schedule.h), reduction lowering
// (lower_group: space, loop order, outputs) and the kernel IR's reduction
// rules, none of which need LLVM; and of the kernel thread pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "inductor/cpu/thread_pool.h"
#include "inductor/kernel_ir.h"
#include "inductor/reduction_split.h"
#include "inductor/schedule.h"
#include "prims/prim_builder.h"

#include "tests/cpp/test_metas.h"

namespace kiln::inductor {
namespace {

using prims::Prim;
using prims::PrimArg;
using prims::PrimBuilder;
using prims::PrimGraph;
using prims::Scalar;

using test::f32;

PrimArg v(int id) { return PrimArg::of_value(id); }

TEST(Schedule, LayerNormTrainingForwardIsOneKernelWithItsStatistics) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({8, 16}));
  auto [var, mean] = b.var_mean(x, {1}, 0, true);
  const int rstd = b.unary(Prim::Rsqrt, b.binary(Prim::Add, v(var), PrimArg::of_scalar(Scalar::of_float(1e-5))));
  const int out = b.binary(Prim::Mul, v(b.binary(Prim::Sub, v(x), v(mean))), v(rstd));
  graph.set_outputs({out, mean, rstd});
  const auto groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes.size(), graph.nodes().size());
  EXPECT_EQ(groups[0].outputs, (std::vector<int>{mean, rstd, out}));
  const LoweredKernel lowered = lower_group(graph, groups[0]);
  EXPECT_EQ(lowered.kernel.reduced, std::vector<int>{1});
  // mean and rstd: stride 0 along the row, stored once per row.
  EXPECT_EQ(lowered.kernel.outputs[0].strides, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(lowered.kernel.outputs[0].tensor_sizes, (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(expr_stages(lowered.kernel)[lowered.kernel.outputs[2].value], 2);
}

TEST(Schedule, OuterReductionTilesItsUnitStrideDim) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({5, 6, 7}));
  graph.set_outputs({b.reduce(Prim::Sum, b.unary(Prim::Exp, x), {0, 1}, false)});
  const auto groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 1u);
  const Kernel k = lower_group(graph, groups[0]).kernel;
  // Reduced dims (5, 6, coalesced to 30), then the kept unit-stride dim as
  // the tile.
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{30, 7}));
  EXPECT_EQ(k.reduced, (std::vector<int>{0}));
  EXPECT_EQ(tile_dim(k), 1);
  EXPECT_EQ(parallel_dim(k), 1);
  // Row reduction over the last dim: kept dims (coalesced) outside, no tile.
  PrimGraph rows;
  PrimBuilder rb(rows);
  rows.set_outputs({rb.reduce(Prim::Amax, rows.add_input(f32({5, 6, 7})), {2}, true)});
  const Kernel r = lower_group(rows, schedule_kernels(rows).at(0)).kernel;
  EXPECT_EQ(r.reduced, std::vector<int>{1});
  EXPECT_EQ(tile_dim(r), -1);
  EXPECT_EQ(parallel_dim(r), 0);
  EXPECT_NE(format_kernel(r).find("kernel amax(30, 7) reduce=(1)"), std::string::npos) << format_kernel(r);
  EXPECT_NE(format_kernel(r).find("reduce_max(%0)"), std::string::npos) << format_kernel(r);
}

TEST(Schedule, KeptAndReducedDimsCoalesce) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({2, 3, 4, 5}));
  const int s = b.reduce(Prim::Sum, x, {2, 3}, true);
  graph.set_outputs({b.binary(Prim::Sub, v(x), v(s)), s});
  const Kernel k = lower_group(graph, schedule_kernels(graph).at(0)).kernel;
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{6, 20}));
  EXPECT_EQ(k.reduced, std::vector<int>{1});
  EXPECT_EQ(k.inputs[0].strides, (std::vector<int64_t>{20, 1}));
  // Outputs in node order: the sum, then the difference.
  EXPECT_EQ(k.outputs[0].strides, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(k.outputs[0].tensor_sizes, (std::vector<int64_t>{2, 3, 1, 1}));
  EXPECT_EQ(k.outputs[1].tensor_sizes, (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(Schedule, SizeOneDimsDrop) {
  // [1, 64, 32] summed over dim 1: the leading 1 goes, so the tile dim (32
  // columns) is the parallel dim rather than a kept dim of size 1.
  PrimGraph graph;
  PrimBuilder b(graph);
  graph.set_outputs({b.reduce(Prim::Sum, graph.add_input(f32({1, 64, 32})), {1}, true)});
  const Kernel k = lower_group(graph, schedule_kernels(graph).at(0)).kernel;
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(k.reduced, std::vector<int>{0});
  EXPECT_EQ(parallel_dim(k), 1);
  EXPECT_EQ(k.outputs[0].tensor_sizes, (std::vector<int64_t>{1, 1, 32}));
}

// The lowered kernel of one reduction of an input of `meta`.
Kernel reduction_kernel(const graph::TensorMeta& meta, Prim prim, std::vector<int64_t> dims) {
  PrimGraph graph;
  PrimBuilder b(graph);
  graph.set_outputs({b.reduce(prim, graph.add_input(meta), dims, false)});
  return lower_group(graph, schedule_kernels(graph).at(0)).kernel;
}

// Note [Split reductions]: which kernels split their reduced range, and
// into which chunks (a function of the sizes alone).
TEST(Schedule, FewKeptPointsSplitTheReducedRange) {
  // x.sum() over 16M: 64 chunks of 262144.
  const ReductionSplit all = split_reduction(reduction_kernel(f32({4096, 4096}), Prim::Sum, {}));
  EXPECT_EQ(all.chunks, 64);
  EXPECT_EQ(all.dim, 0);
  EXPECT_EQ(all.chunk_size, 262144);
  EXPECT_EQ(all.kept_points, 1);
  EXPECT_EQ(all.phases, 1);
  EXPECT_FALSE(all.store_pass);
  // Two long rows: the row's dim splits, both rows per chunk.
  const ReductionSplit rows = split_reduction(reduction_kernel(f32({2, 1000003}), Prim::Amax, {1}));
  EXPECT_EQ(rows.dim, 1);
  EXPECT_EQ(rows.kept_points, 2);
  EXPECT_EQ(rows.chunks, (1000003 + rows.chunk_size - 1) / rows.chunk_size);
  EXPECT_EQ(rows.chunk_size % 16, 0);
  EXPECT_GE(rows.chunks, 2);
  // Enough kept points to split those, or too little work: not split.
  EXPECT_EQ(split_reduction(reduction_kernel(f32({64, 65536}), Prim::Sum, {1})).chunks, 0);
  EXPECT_EQ(split_reduction(reduction_kernel(f32({30000}), Prim::Sum, {})).chunks, 0);
  // An outer (tile-mode) reduction over two columns: the rows split.
  const Kernel tall = reduction_kernel(f32({1000000, 2}), Prim::Sum, {0});
  ASSERT_EQ(tile_dim(tall), 1);
  const ReductionSplit columns = split_reduction(tall);
  EXPECT_EQ(columns.dim, 0);
  EXPECT_EQ(columns.kept_points, 2);
  EXPECT_EQ(columns.chunks, 61);
  // softmax over one long row: max, then sum, then the stored output.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({1 << 20}));
  const int max = b.reduce(Prim::Amax, x, {0}, true);
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, v(x), v(max)));
  graph.set_outputs({b.binary(Prim::Div, v(e), v(b.reduce(Prim::Sum, e, {0}, true)))});
  const ReductionSplit softmax = split_reduction(lower_group(graph, schedule_kernels(graph).at(0)).kernel);
  EXPECT_EQ(softmax.chunks, 32);
  EXPECT_EQ(softmax.phases, 2);
  EXPECT_EQ(softmax.reductions.size(), 2u);
  EXPECT_TRUE(softmax.store_pass);
  EXPECT_EQ(split_steps(softmax), 5);
  EXPECT_EQ(split_workspace_words(softmax), kSplitHeaderWords + 33 * 2);
  // argmax: the max, then the smallest index holding it; two phases.
  const Kernel argmax = reduction_kernel(f32({1 << 20}), Prim::Argmax, {});
  const ReductionSplit arg = split_reduction(argmax);
  EXPECT_EQ(arg.chunks, 32);
  EXPECT_EQ(arg.phases, 2);
  EXPECT_NE(format_kernel(argmax).find("reduce_max"), std::string::npos) << format_kernel(argmax);
  EXPECT_NE(format_kernel(argmax).find("reduce_min"), std::string::npos) << format_kernel(argmax);
}

// Note [Loop order]: a pointwise kernel iterates in its first output's
// memory order, so a transposed or channels-last result (laid out like its
// inputs) becomes one contiguous dim.
TEST(Schedule, PointwiseKernelsIterateInTheOutputsMemoryOrder) {
  graph::TensorMeta transposed = f32({64, 32});
  transposed.strides = {1, 64};
  graph::TensorMeta channels_last = f32({2, 3, 4, 5});
  channels_last.strides = {60, 1, 15, 3};
  for (const graph::TensorMeta& meta : {transposed, channels_last}) {
    PrimGraph graph;
    PrimBuilder b(graph);
    const int x = graph.add_input(meta);
    const int y = b.unary(Prim::Exp, b.binary(Prim::Mul, v(x), PrimArg::of_scalar(Scalar::of_float(2.0))));
    graph.set_outputs({y});
    ASSERT_EQ(graph.value(y).meta.strides, meta.strides);
    const Kernel k = lower_group(graph, schedule_kernels(graph).at(0)).kernel;
    EXPECT_EQ(k.sizes.size(), 1u) << format_kernel(k);
    EXPECT_EQ(k.inputs[0].strides, std::vector<int64_t>{1});
    EXPECT_EQ(k.outputs[0].strides, std::vector<int64_t>{1});
    EXPECT_EQ(k.outputs[0].tensor_strides, meta.strides);
  }
  // A contiguous result over a transposed input: the output's order wins
  // (stores in sequence), the input is read with a stride.
  PrimGraph mixed;
  PrimBuilder mb(mixed);
  const int t = mixed.add_input(transposed);
  const int c = mixed.add_input(f32({64, 32}));
  mixed.set_outputs({mb.binary(Prim::Add, v(c), v(t))});
  const Kernel k = lower_group(mixed, schedule_kernels(mixed).at(0)).kernel;
  ASSERT_EQ(mixed.value(mixed.outputs()[0]).meta.strides, (std::vector<int64_t>{32, 1}));
  EXPECT_EQ(k.outputs[0].strides, (std::vector<int64_t>{32, 1})) << format_kernel(k);
  EXPECT_EQ(k.inputs[1].strides, (std::vector<int64_t>{1, 64})) << format_kernel(k);
}

TEST(Schedule, ReductionsOverOtherDimsStaySeparate) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({8, 16}));
  const int rows = b.reduce(Prim::Sum, x, {1}, true);
  const int centered = b.binary(Prim::Sub, v(x), v(rows));
  graph.set_outputs({b.reduce(Prim::Sum, centered, {0}, false)});
  // sum over dim 1, then over dim 0 of a value that needs it: two kernels.
  const auto groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 2u);
  for (const KernelGroup& group : groups) EXPECT_NO_THROW(lower_group(graph, group));
}

TEST(Schedule, NoGroupLeavesAndReentersItself) {
  // a = exp(x); z = a + a @ w. A boundary that is not fusable (matmul)
  // reads a and feeds z: the group holding z cannot also hold a, since the
  // matmul would run between them.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({4, 8}));
  const int w = graph.add_input(f32({8, 1}));
  const int a = b.unary(Prim::Exp, x);
  const int product = b.matmul(a, w);
  const int z = b.binary(Prim::Add, v(a), v(product));
  graph.set_outputs({z});
  const auto groups = schedule_kernels(graph);
  std::vector<int> group_of(graph.nodes().size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int n : groups[g].nodes) group_of[n] = static_cast<int>(g);
  }
  const int matmul_node = graph.value(product).node;
  const int exp_node = graph.value(a).node;
  const int add_node = graph.value(z).node;
  EXPECT_EQ(group_of[matmul_node], -1);
  EXPECT_NE(group_of[exp_node], group_of[add_node]);
}

// Whether the groups, with each ungrouped node on its own, form no cycle:
// a kernel must be able to run once everything it reads is ready.
bool groups_acyclic(const PrimGraph& graph, const std::vector<KernelGroup>& groups) {
  const int nodes = static_cast<int>(graph.nodes().size());
  std::vector<int> unit(nodes);
  for (int n = 0; n < nodes; ++n) unit[n] = static_cast<int>(groups.size()) + n;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int n : groups[g].nodes) unit[n] = static_cast<int>(g);
  }
  std::vector<std::vector<int>> edges(groups.size() + nodes);
  for (int n = 0; n < nodes; ++n) {
    for (const PrimArg& arg : graph.node(n).args) {
      if (!arg.is_value() || graph.value(arg.value).node < 0) continue;
      const int from = unit[graph.value(arg.value).node];
      if (from != unit[n]) edges[from].push_back(unit[n]);
    }
  }
  std::vector<int> state(edges.size(), 0);  // 0 new, 1 on the stack, 2 done
  std::function<bool(int)> visit = [&](int u) {
    state[u] = 1;
    for (int w : edges[u]) {
      if (state[w] == 1 || (state[w] == 0 && !visit(w))) return false;
    }
    state[u] = 2;
    return true;
  };
  for (size_t u = 0; u < edges.size(); ++u) {
    if (state[u] == 0 && !visit(static_cast<int>(u))) return false;
  }
  return true;
}

TEST(Schedule, ACycleThroughAGroupReachingPastTheWindowIsSeen) {
  // Row statistics h = x.sum(1) come first; a column-reduction group G
  // (exp(x), its sums) reads h late (g + h) and feeds a row-reduction
  // group early (e * h). h joining that row group would close the cycle
  // row group -> G -> row group through G's member after the row group's
  // last node: the search window must widen to G's whole span.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({8, 16}));
  const int h = b.reduce(Prim::Sum, x, {1}, true);
  const int e = b.unary(Prim::Exp, x);
  const int columns = b.reduce(Prim::Sum, e, {0}, false);
  const int rows = b.reduce(Prim::Sum, b.binary(Prim::Mul, v(e), v(h)), {1}, true);
  const int late = b.reduce(Prim::Sum, b.binary(Prim::Add, v(e), v(h)), {0}, false);
  graph.set_outputs({columns, rows, late});
  const auto groups = schedule_kernels(graph);
  // Without the widening the search wrote past its window (heap
  // corruption) and missed the cycle.
  EXPECT_TRUE(groups_acyclic(graph, groups));
  for (const KernelGroup& group : groups) {
    const bool has_h = std::count(group.nodes.begin(), group.nodes.end(), graph.value(h).node) > 0;
    const bool has_rows = std::count(group.nodes.begin(), group.nodes.end(), graph.value(rows).node) > 0;
    EXPECT_FALSE(has_h && has_rows);
  }
  for (const KernelGroup& group : groups) EXPECT_NO_THROW(lower_group(graph, group));
}

TEST(Schedule, NoGroupHoldsReadersOnBothSidesOfAnExternWrite) {
  // w = x + 1; w[0] = -1 (an extern that writes w); y = w * 2. y must read
  // w from memory after the write, not w's value computed in the kernel
  // that makes w, so add and mul are two kernels, ordered around the call.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({4, 5}));
  const int w = b.binary(Prim::Add, v(x), PrimArg::of_scalar(Scalar::of_float(1)));
  b.extern_call(Py_None, "operator.setitem", {graph::Arg::of_node(w)}, {}, {});
  const int y = b.binary(Prim::Mul, v(w), PrimArg::of_scalar(Scalar::of_float(2)));
  graph.set_outputs({y});
  const int add_node = graph.value(w).node, mul_node = graph.value(y).node;
  const int setitem_node = add_node + 1;
  const auto edges = extern_order_edges(graph);
  EXPECT_EQ(edges, (std::vector<std::pair<int, int>>{{setitem_node, mul_node}}));
  const auto groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].nodes, std::vector<int>{add_node});
  EXPECT_EQ(groups[1].nodes, std::vector<int>{mul_node});
}

TEST(Schedule, ExternWritesReachThroughViewsAndExternResults) {
  // v = x.view(20); e = extern(v) (may return v itself); a reader of x
  // before the call goes before it, one of e's alias x after it.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({4, 5}));
  const int before = b.unary(Prim::Exp, x);
  const int view = b.view(x, {20});
  const int e = b.extern_call(Py_None, "operator.imul", {graph::Arg::of_node(view)}, {}, {f32({20})})[0];
  (void)e;
  const int after = b.unary(Prim::Neg, x);
  const int call = graph.value(e).node;
  const auto edges = extern_order_edges(graph);
  const std::vector<std::pair<int, int>> want = {
      {graph.value(before).node, call}, {graph.value(view).node, call}, {call, graph.value(after).node}};
  EXPECT_EQ(edges, want);
}

TEST(Schedule, SiblingsReadingOneTensorMerge) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({8, 16}));
  const int bias = graph.add_input(f32({16}));
  const int s = b.reduce(Prim::Sum, x, {0}, false);
  const int m = b.reduce(Prim::Amax, x, {0}, false);
  const int p = b.binary(Prim::Mul, v(x), PrimArg::of_scalar(Scalar::of_int(2)));
  // Shares only a broadcast bias with the others: stays apart.
  const int q = b.binary(Prim::Add, v(graph.add_input(f32({4, 16}))), v(bias));
  const int r = b.binary(Prim::Add, v(x), v(bias));
  graph.set_outputs({s, m, p, q, r});
  const auto groups = schedule_kernels(graph);
  // sum(0), amax(0), x * 2 and x + bias all read x over the same [8, 16]
  // space: one kernel (the pointwise results are its full outputs); q
  // shares only the bias and stays apart (groups come in the graph order
  // of their last node).
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].outputs, (std::vector<int>{q}));
  EXPECT_EQ(groups[1].outputs, (std::vector<int>{s, m, p, r}));
  for (const KernelGroup& group : groups) EXPECT_NO_THROW(lower_group(graph, group));
}

TEST(Schedule, SiblingsFarApartStayApart) {
  // x.sum(0) first and x.amax(0) after 70 nodes of other work (five
  // chains over other spaces, so no neighbour merge either): merged, the
  // sum would wait for the amax's turn (kSiblingReach), as every layer's
  // weight gradients of a backward graph did through their saved inputs.
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({8, 16}));
  const int s = b.reduce(Prim::Sum, x, {0}, false);
  std::vector<int> outputs = {s};
  for (int k = 1; k <= 5; ++k) {
    int chain = graph.add_input(f32({k + 1, 3}));
    for (int i = 0; i < 14; ++i) chain = b.unary(Prim::Neg, chain);
    outputs.push_back(chain);
  }
  const int m = b.reduce(Prim::Amax, x, {0}, false);
  outputs.push_back(m);
  graph.set_outputs(outputs);
  const auto groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 7u);
  EXPECT_EQ(groups.front().outputs, (std::vector<int>{s}));
  EXPECT_EQ(groups.back().outputs, (std::vector<int>{m}));
}

TEST(Schedule, IndependentNeighboursOverOneSpaceMerge) {
  // Attention's q, k and v gradients, each transposed back to [b, t, h, d]
  // (a contiguous clone of a permute): three groups over one space that
  // read nothing in common become one kernel of three outputs. Two column
  // sums over one [64, 24] space merge the same way; a sum over another
  // space, and a group that needs another's result through a matmul, stay
  // apart.
  PrimGraph graph;
  PrimBuilder b(graph);
  std::vector<int> clones;
  for (int i = 0; i < 3; ++i) {
    const int grad = graph.add_input(f32({2, 3, 5, 4}));
    clones.push_back(b.clone(b.permute(grad, {0, 2, 1, 3}), prims::MemoryFormat::Contiguous));
  }
  const int p1 = graph.add_input(f32({64, 24})), p2 = graph.add_input(f32({64, 24}));
  const int s1 = b.reduce(Prim::Sum, p1, {0}, false), s2 = b.reduce(Prim::Sum, p2, {0}, false);
  const int other = b.reduce(Prim::Sum, graph.add_input(f32({32, 24})), {0}, false);
  const int e = b.unary(Prim::Exp, graph.add_input(f32({64, 24})));
  const int product = b.matmul(e, graph.add_input(f32({24, 24})));
  const int after = b.unary(Prim::Neg, product);
  graph.set_outputs({clones[0], clones[1], clones[2], s1, s2, other, after});
  const auto groups = schedule_kernels(graph);
  std::vector<std::vector<int>> outputs;
  for (const KernelGroup& group : groups) {
    outputs.push_back(group.outputs);
    EXPECT_NO_THROW(lower_group(graph, group));
  }
  const std::vector<std::vector<int>> want = {clones, {s1, s2}, {other}, {e}, {after}};
  EXPECT_EQ(outputs, want);
}

TEST(KernelIr, ReductionRules) {
  Kernel k;
  k.sizes = {4, 8};
  const int x = k.load(k.add_input({graph::DType::Float32, {8, 1}, 0}));
  const int s = k.reduce(ReduceOp::Sum, x);
  k.add_output({graph::DType::Float32, {1, 0}, s});
  EXPECT_EQ(verify(k), "%1 (reduce): a reduction in a kernel without reduced dims");
  k.reduced = {1};
  EXPECT_EQ(verify(k), "");
  // A value that varies along the reduced dim cannot be stored with stride 0.
  k.outputs[0].value = x;
  EXPECT_NE(verify(k).find("not constant along every reduced dim"), std::string::npos) << verify(k);
  k.outputs[0].value = s;
  k.outputs[0].strides = {0, 0};
  EXPECT_EQ(verify(k), "out0: stride 0 in a kept dim of size > 1");
  k.outputs[0].strides = {1, 0};
  k.reduced = {0};
  EXPECT_NE(verify(k), "");  // the output is stride 0 along a kept dim now
  Kernel three;
  three.sizes = {2, 3, 4};
  three.reduced = {0, 2};
  three.add_output({graph::DType::Float32, {12, 4, 1}, three.constant(graph::DType::Float32, 1)});
  EXPECT_EQ(verify(three), "reduced dims must be adjacent");
}

TEST(ThreadPool, EveryChunkRunsOnceAcrossManyJobs) {
  for (int chunks : {1, 2, 3, 7}) {
    for (int job = 0; job < 200; ++job) {
      std::vector<std::atomic<int>> ran(chunks);
      cpu::parallel_run(chunks, 1 + job % 3, [&](int i) { ran[i].fetch_add(1); });
      for (int i = 0; i < chunks; ++i) ASSERT_EQ(ran[i].load(), 1) << chunks << " chunks, job " << job;
    }
  }
}

}  // namespace
}  // namespace kiln::inductor
