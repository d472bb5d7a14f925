// Tests of inductor/kernel_ir.h (verify, text form) and of the fusion
// decision and lowering in inductor/lower_pointwise.h. No LLVM needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "inductor/kernel_ir.h"
#include "inductor/lower_group.h"
#include "inductor/lower_pointwise.h"
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

TEST(KernelIr, TextFormAndVerify) {
  Kernel k;
  k.name = "add1";
  k.sizes = {4, 8};
  const int in = k.add_input({DType::Float32, {8, 1}, 0});
  const int x = k.load(in);
  const int sum = k.binary(BinaryOp::Add, x, k.constant(DType::Float32, 1));
  k.add_output({DType::Float32, {8, 1}, k.select(k.compare(CompareOp::Gt, x, sum), x, sum)});
  EXPECT_EQ(verify(k), "");
  EXPECT_EQ(format_kernel(k),
            "kernel add1(4, 8)\n"
            "  in0: f32 strides=(8, 1) offset=0\n"
            "  %0 = load in0 : f32\n"
            "  %1 = const 1.0 : f32\n"
            "  %2 = add(%0, %1) : f32\n"
            "  %3 = gt(%0, %2) : b8\n"
            "  %4 = select(%3, %0, %2) : f32\n"
            "  out0: f32 strides=(8, 1) = %4\n");
}

TEST(KernelIr, VerifyRejects) {
  Kernel k;
  k.sizes = {4};
  const int h = k.load(k.add_input({DType::Float16, {1}, 0}));
  const int bad = k.unary(UnaryOp::Exp, h);  // arithmetic on a storage dtype
  k.add_output({DType::Float32, {1}, bad});
  EXPECT_NE(verify(k).find("f16 is a storage dtype"), std::string::npos) << verify(k);

  Kernel ints;
  ints.sizes = {4};
  const int i = ints.load(ints.add_input({DType::Int64, {1}, 0}));
  ints.add_output({DType::Int64, {1}, ints.unary(UnaryOp::Exp, i)});
  EXPECT_NE(verify(ints).find("needs a float operand"), std::string::npos) << verify(ints);

  Kernel racy;
  racy.sizes = {4};
  racy.add_output({DType::Float32, {0}, racy.constant(DType::Float32, 1)});
  EXPECT_NE(verify(racy).find("stride 0"), std::string::npos) << verify(racy);

  Kernel mixed;
  mixed.sizes = {};
  const int a = mixed.constant(DType::Float32, 1), b = mixed.constant(DType::Float64, 1);
  mixed.add_output({DType::Float32, {}, mixed.binary(BinaryOp::Add, a, b)});
  EXPECT_NE(verify(mixed).find("share a dtype"), std::string::npos) << verify(mixed);
}

// An Index expression (argmax's flat position, Note [Kernel expressions]):
// int64, varies along the dims it counts, and its strides merge with the
// dims like an input's.
TEST(KernelIr, IndexStridesMergeWithTheDims) {
  Kernel k;
  k.name = "first";
  k.sizes = {6, 4, 5};
  k.reduced = {1, 2};
  const int x = k.load(k.add_input({DType::Float32, {20, 5, 1}, 0}));
  const int at = k.index({0, 5, 1});
  const int hit = k.compare(CompareOp::Gt, x, k.constant(DType::Float32, 0));
  const int first = k.reduce(ReduceOp::Min, k.select(hit, at, k.constant(DType::Int64, 20)));
  k.add_output({DType::Int64, {1, 0, 0}, first});
  EXPECT_EQ(verify(k), "");
  const std::string text = format_kernel(k);
  EXPECT_NE(text.find("%1 = index strides=(0, 5, 1) : i64"), std::string::npos) << text;
  EXPECT_TRUE(expr_varies(k)[at]);
  coalesce_dims(k);
  EXPECT_EQ(k.sizes, (std::vector<int64_t>{6, 20}));
  EXPECT_EQ(k.exprs[at].strides, (std::vector<int64_t>{0, 1}));

  Kernel wrong_index = k;
  wrong_index.exprs[at].strides = {1};
  EXPECT_NE(verify(wrong_index).find("strides rank differs"), std::string::npos) << verify(wrong_index);
}

TEST(LowerPointwise, ChainIsOneKernelWithBroadcastAndScalars) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({4, 1}));
  const int y = graph.add_input(f32({1, 8}));
  const int sum = b.binary(Prim::Add, PrimArg::of_value(x), PrimArg::of_value(y));
  const int out = b.binary(Prim::Mul, PrimArg::of_value(sum), PrimArg::of_scalar(Scalar::of_float(0.5)));
  graph.set_outputs({out});
  const auto groups = find_pointwise_groups(graph);
  ASSERT_EQ(groups.size(), 1u);
  const LoweredKernel lowered = lower_pointwise(graph, groups[0]);
  EXPECT_EQ(lowered.inputs, (std::vector<int>{x, y}));
  EXPECT_EQ(lowered.outputs, (std::vector<int>{out}));
  EXPECT_EQ(format_kernel(lowered.kernel),
            "kernel mul(4, 8)\n"
            "  in0: f32 strides=(1, 0) offset=0\n"
            "  in1: f32 strides=(0, 1) offset=0\n"
            "  %0 = load in0 : f32\n"
            "  %1 = load in1 : f32\n"
            "  %2 = add(%0, %1) : f32\n"
            "  %3 = const 0.5 : f32\n"
            "  %4 = mul(%2, %3) : f32\n"
            "  out0: f32 strides=(8, 1) = %4\n");
}

TEST(LowerPointwise, SharedIntermediateSplitsGroups) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({16}));
  const int e = b.unary(Prim::Exp, x);
  const int s = b.unary(Prim::Sin, e);
  const int c = b.unary(Prim::Cos, e);
  const int out = b.binary(Prim::Add, PrimArg::of_value(s), PrimArg::of_value(c));
  graph.set_outputs({out});
  // exp is used twice by the add's tree: still one group (both uses inside).
  auto groups = find_pointwise_groups(graph);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes.size(), 4u);
  // Returning exp too makes it a group of its own.
  graph.set_outputs({out, e});
  groups = find_pointwise_groups(graph);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].nodes, (std::vector<int>{0}));
  // A reduction is a boundary.
  PrimGraph reduced;
  PrimBuilder rb(reduced);
  const int r = rb.reduce(Prim::Sum, rb.unary(Prim::Exp, reduced.add_input(f32({4, 4}))), {1}, false);
  reduced.set_outputs({rb.unary(Prim::Log, r)});
  EXPECT_EQ(find_pointwise_groups(reduced).size(), 2u);
}

TEST(LowerPointwise, ViewsFoldIntoIndexing) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({2, 3}));
  const int w = graph.add_input(f32({3, 2}));
  // (x * 2).permute(1, 0) + w.reshape(6).view(3, 2): the permute of a
  // computed value maps indices; the reshape chain over an input loads
  // through its own strides.
  const int scaled = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_scalar(Scalar::of_int(2)));
  const int t = b.permute(scaled, {1, 0});
  const int wv = b.view(b.reshape(w, {6}), {3, 2});
  const int out = b.binary(Prim::Add, PrimArg::of_value(t), PrimArg::of_value(wv));
  graph.set_outputs({out});
  const auto groups = find_pointwise_groups(graph);
  ASSERT_EQ(groups.size(), 1u);
  const LoweredKernel lowered = lower_pointwise(graph, groups[0]);
  ASSERT_EQ(lowered.kernel.inputs.size(), 2u);
  EXPECT_EQ(lowered.kernel.inputs[0].strides, (std::vector<int64_t>{1, 3}));  // x transposed
  EXPECT_EQ(lowered.kernel.inputs[1].strides, (std::vector<int64_t>{2, 1}));
}

// Note [Loads at computed indices]: indices are i64, one stride each.
TEST(KernelIr, LoadAtVerifiesItsIndices) {
  Kernel k;
  k.sizes = {4};
  const int in = k.add_input({DType::Float32, {0}, 0});
  const int at = k.index({1});
  k.add_output({DType::Float32, {1}, k.load_at(in, {at}, {1})});
  EXPECT_EQ(verify(k), "");
  EXPECT_TRUE(format_kernel(k).find("load_at in0[%0 * 1] : f32") != std::string::npos) << format_kernel(k);

  Kernel no_stride = k;
  no_stride.exprs[1].strides.clear();
  EXPECT_NE(verify(no_stride).find("one stride per index"), std::string::npos) << verify(no_stride);
  Kernel float_index = k;
  float_index.exprs[0] = Expr{ExprKind::Constant, DType::Float32};
  EXPECT_NE(verify(float_index).find("indices are i64"), std::string::npos) << verify(float_index);
}

// Note [Cat in kernels]: a roll (a cat of two slices of one value) is one
// load at a selected index; a cat of two values a select between two
// clamped loads; a view splitting a computed value's dim reads it with
// plain strides.
TEST(LowerGroup, CatsAndSplitViewsFoldIntoIndexing) {
  PrimGraph graph;
  PrimBuilder b(graph);
  const int x = graph.add_input(f32({6, 8}));
  const int y = graph.add_input(f32({6, 3}));
  const int doubled = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_scalar(Scalar::of_int(2)));
  const int rolled = b.cat({b.slice(doubled, 1, 6, 8, 1), b.slice(doubled, 1, 0, 6, 1)}, 1);
  const int roll_out = b.unary(Prim::Exp, rolled);
  const int joined = b.unary(Prim::Neg, b.cat({x, y}, 1));
  const int split = b.view(b.unary(Prim::Sin, x), {6, 2, 4});
  const int split_out = b.binary(Prim::Add, PrimArg::of_value(split), PrimArg::of_scalar(Scalar::of_int(1)));
  graph.set_outputs({roll_out, joined, split_out});
  const std::vector<KernelGroup> groups = schedule_kernels(graph);
  ASSERT_EQ(groups.size(), 3u);
  auto load_ats = [](const Kernel& k) {
    int count = 0;
    for (const Expr& e : k.exprs) count += e.kind == ExprKind::LoadAt ? 1 : 0;
    return count;
  };
  for (const KernelGroup& group : groups) {
    const LoweredKernel lowered = lower_group(graph, group);
    const Kernel& k = lowered.kernel;
    SCOPED_TRACE(format_kernel(k));
    ASSERT_EQ(lowered.outputs.size(), 1u);
    const int out = lowered.outputs[0];
    if (out == roll_out) {
      EXPECT_EQ(k.inputs.size(), 1u);
      EXPECT_EQ(load_ats(k), 1);
    } else if (out == joined) {
      EXPECT_EQ(k.inputs.size(), 2u);
      EXPECT_EQ(load_ats(k), 2);
    } else {
      EXPECT_EQ(out, split_out);
      EXPECT_EQ(load_ats(k), 0);
      ASSERT_EQ(k.inputs.size(), 1u);
    }
  }
}

}  // namespace
}  // namespace kiln::inductor
