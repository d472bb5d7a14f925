// Tests of autograd/partitioner.h: the forward and backward graphs compute
// the same gradients as the joint graph, the min-cut saves no more bytes
// than saving everything the backward reads, and cheap elementwise chains
// are recomputed rather than saved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "autograd/joint_graph.h"
#include "autograd/partitioner.h"
#include "prims/extern_writes.h"
#include "prims/prim_builder.h"
#include "runtime/prim_executor.h"
#include "tests/cpp/runtime/python_test_util.h"
#include "tests/cpp/test_metas.h"

namespace kiln::autograd {
namespace {

using prims::Prim;
using prims::PrimArg;
using test::PyRef;

using test::f64;

// Runs `graph` on `inputs`; returns new references to its outputs.
std::vector<PyRef> run(const prims::PrimGraph& graph, const std::vector<PyObject*>& inputs) {
  runtime::PrimExecutor executor(std::make_shared<prims::PrimGraph>(graph));
  std::vector<PyObject*> outs(graph.outputs().size(), nullptr);
  EXPECT_TRUE(executor.run_values(inputs.data(), outs.data())) << test::take_error();
  std::vector<PyRef> result;
  for (PyObject* out : outs) result.push_back(PyRef::steal(out));
  return result;
}

// The forward graph's outputs on `inputs`, and the backward graph's on
// the values the forward saved and `grads`.
struct PartitionRun {
  std::vector<PyRef> forward;
  std::vector<PyRef> backward;
};

PartitionRun run_partition(const Partition& part, const std::vector<PyObject*>& inputs,
                           const std::vector<PyObject*>& grads) {
  PartitionRun out;
  out.forward = run(part.forward, inputs);
  EXPECT_EQ(out.forward.size(), static_cast<size_t>(part.forward_output_count + part.saved_count));
  std::vector<PyObject*> saved_and_grads;
  for (int k = 0; k < part.saved_count; ++k) {
    saved_and_grads.push_back(out.forward[part.forward_output_count + k].get());
  }
  saved_and_grads.insert(saved_and_grads.end(), grads.begin(), grads.end());
  out.backward = run(part.backward, saved_and_grads);
  return out;
}

bool same(PyObject* a, PyObject* b) {
  PyRef equal = PyRef::steal(PyObject_CallMethod(test::eval("torch").get(), "allclose", "OO", a, b));
  return equal.get() == Py_True;
}

// A small MLP-like forward: tanh(x * w + b).exp().sum(1) and amax.
prims::PrimGraph sample_forward() {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({4, 5}));
  const int w = g.add_input(f64({5}));
  const int bias = g.add_input(f64({5}));
  const int h = b.binary(Prim::Add, PrimArg::of_value(b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(w))),
                         PrimArg::of_value(bias));
  const int t = b.unary(Prim::Exp, b.unary(Prim::Tanh, h));
  const int s = b.reduce(Prim::Sum, t, {1}, false);
  const int m = b.reduce(Prim::Amax, h, {0}, false);
  g.set_outputs({s, m});
  return g;
}

void expect_partition_matches_joint(SavePolicy policy) {
  prims::PrimGraph forward = sample_forward();
  JointGraph joint = build_joint_graph(forward, {true, true, false});
  Partition part = partition_joint_graph(joint, policy);
  ASSERT_EQ(part.forward.verify(), "");
  ASSERT_EQ(part.backward.verify(), "");
  PyRef x = test::eval("torch.randn(4, 5, dtype=torch.float64)");
  PyRef w = test::eval("torch.randn(5, dtype=torch.float64)");
  PyRef bias = test::eval("torch.randn(5, dtype=torch.float64)");
  PyRef gs = test::eval("torch.randn(4, dtype=torch.float64)");
  PyRef gm = test::eval("torch.randn(5, dtype=torch.float64)");
  std::vector<PyRef> joint_out = run(joint.graph, {x.get(), w.get(), bias.get(), gs.get(), gm.get()});
  const PartitionRun ran = run_partition(part, {x.get(), w.get(), bias.get()}, {gs.get(), gm.get()});
  const std::vector<PyRef>& fwd_out = ran.forward;
  const std::vector<PyRef>& bwd_out = ran.backward;
  // Forward outputs, then the input gradients of x and w.
  EXPECT_TRUE(same(fwd_out[0].get(), joint_out[0].get()));
  EXPECT_TRUE(same(fwd_out[1].get(), joint_out[1].get()));
  ASSERT_EQ(bwd_out.size(), 2u);
  EXPECT_EQ(part.input_grad_slot, (std::vector<int>{0, 1, -1}));
  EXPECT_TRUE(same(bwd_out[0].get(), joint_out[2].get()));
  EXPECT_TRUE(same(bwd_out[1].get(), joint_out[3].get()));
}

TEST(Partitioner, MinCutGraphsComputeTheJointGradients) { expect_partition_matches_joint(SavePolicy::MinCut); }

TEST(Partitioner, SaveNeededGraphsComputeTheJointGradients) {
  expect_partition_matches_joint(SavePolicy::SaveNeeded);
}

TEST(Partitioner, MinCutSavesNoMoreThanSavingEverythingNeeded) {
  JointGraph joint = build_joint_graph(sample_forward(), {true, true, false});
  Partition min_cut = partition_joint_graph(joint, SavePolicy::MinCut);
  Partition all = partition_joint_graph(joint, SavePolicy::SaveNeeded);
  EXPECT_LE(min_cut.saved_bytes, all.saved_bytes);
}

// sum(sigmoid(exp(tanh(x)))) over 64 float64 values.
prims::PrimGraph elementwise_chain() {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({64}));
  const int y = b.unary(Prim::Sigmoid, b.unary(Prim::Exp, b.unary(Prim::Tanh, x)));
  g.set_outputs({b.reduce(Prim::Sum, y, {}, false)});
  return g;
}

TEST(Partitioner, ElementwiseChainIsRecomputedFromItsInput) {
  // y = sigmoid(exp(tanh(x))): saving x alone lets the backward recompute
  // the chain; saving the intermediates would cost three times as much.
  JointGraph joint = build_joint_graph(elementwise_chain(), {true});
  Partition part = partition_joint_graph(joint, SavePolicy::MinCut);
  EXPECT_EQ(part.saved_count, 1);
  EXPECT_EQ(part.saved_bytes, 64 * 8);
  Partition all = partition_joint_graph(joint, SavePolicy::SaveNeeded);
  EXPECT_GT(all.saved_bytes, part.saved_bytes);
}

TEST(Partitioner, RecomputationRunsWhereTheBackwardNeedsIt) {
  // Note [Late recomputation]: the recomputed chain runs after the nodes
  // that read the incoming gradient before it, not at the start.
  JointGraph joint = build_joint_graph(elementwise_chain(), {true});
  Partition part = partition_joint_graph(joint, SavePolicy::MinCut);
  ASSERT_EQ(part.backward.verify(), "");
  const int grad = part.backward.inputs().at(part.saved_count);
  bool reads_grad = false;
  for (const prims::PrimArg& arg : part.backward.node(0).args) reads_grad = reads_grad || arg.value == grad;
  EXPECT_TRUE(reads_grad) << prims::format_prim_graph(part.backward);
  int first_tanh = -1;
  for (size_t n = 0; n < part.backward.nodes().size() && first_tanh < 0; ++n) {
    if (part.backward.node(static_cast<int>(n)).prim == Prim::Tanh) first_tanh = static_cast<int>(n);
  }
  EXPECT_GT(first_tanh, 0) << prims::format_prim_graph(part.backward);
}

TEST(Partitioner, LongElementwiseChainsAreCutForRecomputation) {
  // Note [Long recomputation chains]: tanh applied 40 times. By bytes the
  // cut would save x alone and the backward would recompute all 40 from
  // it before its first step; the chain is cut every 16 elementwise nodes,
  // so no recomputed value lies deeper than that below a saved one.
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({64}));
  int y = x;
  for (int i = 0; i < 40; ++i) y = b.unary(Prim::Tanh, y);
  g.set_outputs({b.reduce(Prim::Sum, y, {}, false)});
  JointGraph joint = build_joint_graph(g, {true});
  Partition part = partition_joint_graph(joint, SavePolicy::MinCut);
  ASSERT_EQ(part.backward.verify(), "");
  EXPECT_GE(part.saved_count, 3);
  // Depth of each recomputed value (read no incoming gradient) below the saved ones.
  std::vector<int> depth(part.backward.values().size(), 0);
  std::vector<bool> from_grad(part.backward.values().size(), false);
  for (size_t i = part.saved_count; i < part.backward.inputs().size(); ++i) {
    from_grad[part.backward.inputs()[i]] = true;
  }
  int deepest = 0;
  for (const prims::PrimNode& node : part.backward.nodes()) {
    bool grad = false;
    int d = 0;
    for (int id : prims::node_reads(node)) {
      grad = grad || from_grad[id];
      d = std::max(d, depth[id]);
    }
    for (int id : node.outputs) {
      from_grad[id] = grad;
      depth[id] = grad ? 0 : d + 1;
      if (!grad) deepest = std::max(deepest, depth[id]);
    }
  }
  EXPECT_LE(deepest, 16) << prims::format_prim_graph(part.backward);
  // The gradient is the joint graph's.
  PyRef xs = test::eval("torch.randn(64, dtype=torch.float64)");
  PyRef gy = test::eval("torch.tensor(1.5, dtype=torch.float64)");
  std::vector<PyRef> joint_out = run(joint.graph, {xs.get(), gy.get()});
  const PartitionRun ran = run_partition(part, {xs.get()}, {gy.get()});
  ASSERT_EQ(ran.backward.size(), 1u);
  EXPECT_TRUE(same(ran.backward[0].get(), joint_out[1].get()));
}

TEST(Partitioner, ReductionsAreSavedNotRecomputed) {
  // softmax: the backward needs the output; amax and sum are never
  // recomputed in the backward.
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({8, 16}));
  const int m = b.reduce(Prim::Amax, x, {1}, true);
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(m)));
  const int y = b.binary(Prim::Div, PrimArg::of_value(e), PrimArg::of_value(b.reduce(Prim::Sum, e, {1}, true)));
  g.set_outputs({y});
  Partition part = partition_joint_graph(build_joint_graph(g, {true}), SavePolicy::MinCut);
  for (const prims::PrimNode& node : part.backward.nodes()) {
    EXPECT_NE(node.prim, Prim::Amax) << prims::format_prim_graph(part.backward);
  }
  EXPECT_GT(part.saved_count, 0);
}

TEST(Partitioner, WrittenValuesStayInTheForwardAndWritesRunThere) {
  // w = zeros (cheap, so normally recomputed); setitem(w, 0, 3) writes into
  // it and returns nothing; y = x * w. The backward needs w as written: it
  // must be saved, and the write must run in the forward.
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({4}));
  const int detached = b.full({4}, prims::Scalar::of_float(0), graph::DType::Float64);
  PyRef setitem = test::eval("operator.setitem");
  b.extern_call(setitem.get(), "operator.setitem",
                {graph::Arg::of_node(detached), graph::Arg::of_constant(test::py_int(0).get()),
                 graph::Arg::of_constant(PyRef::steal(PyFloat_FromDouble(3.0)).get())},
                {}, {});
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(detached));
  g.set_outputs({y});
  Partition part = partition_joint_graph(build_joint_graph(g, {true}), SavePolicy::MinCut);
  bool write_in_forward = false;
  for (const prims::PrimNode& node : part.forward.nodes()) {
    write_in_forward = write_in_forward || node.attrs.target_name == "operator.setitem";
  }
  EXPECT_TRUE(write_in_forward) << prims::format_prim_graph(part.forward);
  for (const prims::PrimNode& node : part.backward.nodes()) {
    EXPECT_NE(node.prim, Prim::Extern) << prims::format_prim_graph(part.backward);
  }
  // Run it: the gradient of x is grad * w as written ([3, 0, 0, 0]).
  auto forward = std::make_shared<const prims::PrimGraph>(part.forward);
  auto backward = std::make_shared<const prims::PrimGraph>(part.backward);
  PyRef xs = test::eval("torch.ones(4, dtype=torch.float64)");
  PyObject* in[] = {xs.get()};
  PyRef outs = PyRef::steal(runtime::PrimExecutor(forward).run(in));
  ASSERT_TRUE(outs) << test::take_error();
  std::vector<PyObject*> back_in;
  for (Py_ssize_t k = part.forward_output_count; k < part.forward_output_count + part.saved_count; ++k) {
    back_in.push_back(PyTuple_GET_ITEM(outs.get(), k));
  }
  PyRef grad = test::eval("torch.ones(4, dtype=torch.float64)");
  back_in.push_back(grad.get());
  PyRef grads = PyRef::steal(runtime::PrimExecutor(backward).run(back_in.data()));
  ASSERT_TRUE(grads) << test::take_error();
  PyRef list = PyRef::steal(PyObject_CallMethod(PyTuple_GET_ITEM(grads.get(), 0), "tolist", nullptr));
  EXPECT_EQ(test::str_of(list.get()), "[3.0, 0.0, 0.0, 0.0]");
}

// Two checkpointed blocks y = tanh(x @ w1) @ w2 applied one after the
// other, then summed; with `regions`, each block's values carry its id as
// the tracer marks a torch.utils.checkpoint call's function.
prims::PrimGraph checkpointed_blocks(bool regions) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({8, 16}));
  const int w1 = g.add_input(f64({16, 16}));
  const int w2 = g.add_input(f64({16, 16}));
  int y = x;
  for (int region = 0; region < 2; ++region) {
    const int first = static_cast<int>(g.values().size());
    y = b.matmul(b.unary(Prim::Tanh, b.matmul(y, w1)), w2);
    for (int v = first; regions && v < static_cast<int>(g.values().size()); ++v) g.mark_checkpoint(v, region);
  }
  g.set_outputs({b.reduce(Prim::Sum, y, {}, false)});
  return g;
}

TEST(Partitioner, CheckpointedRegionsSaveOnlyTheirResults) {
  // Note [Checkpointed regions]: a block's matmul and tanh results are
  // recomputed in the backward; the first block's result (the second's
  // input) is saved, as eager checkpointing keeps its arguments. Unmarked,
  // the min-cut saves the tanh results the weight gradients read.
  JointGraph marked = build_joint_graph(checkpointed_blocks(true), {true, true, true});
  Partition part = partition_joint_graph(marked, SavePolicy::MinCut);
  ASSERT_EQ(part.forward.verify(), "");
  ASSERT_EQ(part.backward.verify(), "");
  std::vector<Prim> saved_makers;
  for (int k = 0; k < part.saved_count; ++k) {
    const int id = part.forward.outputs()[part.forward_output_count + k];
    if (part.forward.value(id).node >= 0) saved_makers.push_back(part.forward.node(part.forward.value(id).node).prim);
  }
  EXPECT_EQ(saved_makers, (std::vector<Prim>{Prim::Matmul})) << prims::format_prim_graph(part.forward);
  int recomputed_tanh = 0;
  for (const prims::PrimNode& node : part.backward.nodes()) recomputed_tanh += node.prim == Prim::Tanh;
  EXPECT_EQ(recomputed_tanh, 2) << prims::format_prim_graph(part.backward);
  Partition unmarked = partition_joint_graph(build_joint_graph(checkpointed_blocks(false), {true, true, true}));
  EXPECT_LT(part.saved_bytes, unmarked.saved_bytes);
  // Same gradients as the joint graph.
  PyRef x = test::eval("torch.randn(8, 16, dtype=torch.float64)");
  PyRef w1 = test::eval("torch.randn(16, 16, dtype=torch.float64) / 4");
  PyRef w2 = test::eval("torch.randn(16, 16, dtype=torch.float64) / 4");
  PyRef grad = test::eval("torch.tensor(1.5, dtype=torch.float64)");
  std::vector<PyRef> joint_out = run(marked.graph, {x.get(), w1.get(), w2.get(), grad.get()});
  const PartitionRun ran = run_partition(part, {x.get(), w1.get(), w2.get()}, {grad.get()});
  const std::vector<PyRef>& fwd_out = ran.forward;
  const std::vector<PyRef>& bwd_out = ran.backward;
  ASSERT_EQ(bwd_out.size(), 3u);
  EXPECT_TRUE(same(fwd_out[0].get(), joint_out[0].get()));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(bwd_out[i].get(), joint_out[1 + i].get())) << "gradient " << i;
}

// The prims that make the values `part`'s forward saves (inputs left out).
std::vector<Prim> saved_makers(const Partition& part) {
  std::vector<Prim> makers;
  for (int k = 0; k < part.saved_count; ++k) {
    const int id = part.forward.outputs()[part.forward_output_count + k];
    if (part.forward.value(id).node >= 0) makers.push_back(part.forward.node(part.forward.value(id).node).prim);
  }
  return makers;
}

TEST(Partitioner, TheViewTheBackwardReadsIsSavedNotItsBase) {
  // Note [Saved views]: a matmul's output flattened for the next matmul,
  // whose weight gradient reads the flattened value (through its
  // transpose, no pair with the reshape). Saving the matmul's output
  // costs the same bytes but leaves the backward to flatten it again.
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({4, 6}));
  const int w = g.add_input(f64({6, 6}));
  const int v = g.add_input(f64({12, 5}));
  const int flat = b.reshape(b.matmul(x, w), {2, 12});
  g.set_outputs({b.reduce(Prim::Sum, b.matmul(flat, v), {}, false)});
  JointGraph joint = build_joint_graph(g, {true, true, true});
  Partition part = partition_joint_graph(joint, SavePolicy::MinCut);
  ASSERT_EQ(part.backward.verify(), "");
  EXPECT_EQ(saved_makers(part), (std::vector<Prim>{Prim::Reshape})) << prims::format_prim_graph(part.forward);
  PyRef xs = test::eval("torch.randn(4, 6, dtype=torch.float64)");
  PyRef ws = test::eval("torch.randn(6, 6, dtype=torch.float64)");
  PyRef vs = test::eval("torch.randn(12, 5, dtype=torch.float64)");
  PyRef grad = test::eval("torch.tensor(1.5, dtype=torch.float64)");
  std::vector<PyRef> joint_out = run(joint.graph, {xs.get(), ws.get(), vs.get(), grad.get()});
  const PartitionRun ran = run_partition(part, {xs.get(), ws.get(), vs.get()}, {grad.get()});
  ASSERT_EQ(ran.backward.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(ran.backward[i].get(), joint_out[1 + i].get())) << "gradient " << i;
}

TEST(Partitioner, AViewOnlyKernelsReadIsNotSaved) {
  // Batch norm's weight reshaped to [1, C, 1, 1] and multiplied: the
  // backward's readers are elementwise, whose kernels index the weight
  // itself, so the weight is saved and the forward makes no view step.
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({2, 3, 2, 2}));
  const int w = g.add_input(f64({3}));
  const int scaled = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(b.reshape(w, {1, 3, 1, 1})));
  g.set_outputs({b.reduce(Prim::Sum, b.unary(Prim::Tanh, scaled), {}, false)});
  JointGraph joint = build_joint_graph(g, {true, true});
  Partition part = partition_joint_graph(joint, SavePolicy::MinCut);
  ASSERT_EQ(part.backward.verify(), "");
  for (Prim maker : saved_makers(part)) EXPECT_NE(maker, Prim::Reshape) << prims::format_prim_graph(part.forward);
  PyRef xs = test::eval("torch.randn(2, 3, 2, 2, dtype=torch.float64)");
  PyRef ws = test::eval("torch.randn(3, dtype=torch.float64)");
  PyRef grad = test::eval("torch.tensor(0.5, dtype=torch.float64)");
  std::vector<PyRef> joint_out = run(joint.graph, {xs.get(), ws.get(), grad.get()});
  const PartitionRun ran = run_partition(part, {xs.get(), ws.get()}, {grad.get()});
  ASSERT_EQ(ran.backward.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(same(ran.backward[i].get(), joint_out[1 + i].get())) << "gradient " << i;
}

TEST(Partitioner, AViewTheBackwardOnlyUndoesIsNotSaved) {
  // A linear layer multiplies by its weight transposed; the input's
  // gradient transposes it back, a pair Note [View pairs] folds to the
  // weight. Saving the transposed weight would leave a transpose of a
  // saved value that no longer folds.
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({4, 6}));
  const int w = g.add_input(f64({8, 6}));
  const int y = b.unary(Prim::Tanh, b.matmul(x, b.permute(w, {1, 0})));
  g.set_outputs({b.reduce(Prim::Sum, y, {}, false)});
  Partition part = partition_joint_graph(build_joint_graph(g, {true, true}), SavePolicy::MinCut);
  for (Prim maker : saved_makers(part)) EXPECT_NE(maker, Prim::Permute) << prims::format_prim_graph(part.forward);
}

}  // namespace
}  // namespace kiln::autograd
