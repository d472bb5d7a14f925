// Tests of autograd/joint_graph.h: the joint graph's gradients equal torch
// autograd's over the same forward (run through the prim executor with
// inputs that require grad), in float64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "autograd/derivatives.h"
#include "autograd/joint_graph.h"
#include "prims/prim_builder.h"
#include "runtime/prim_executor.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::autograd {
namespace {

using prims::Prim;
using prims::PrimArg;
using test::PyRef;

graph::TensorMeta f64(std::vector<int64_t> sizes) {
  graph::TensorMeta meta;
  meta.sizes = sizes;
  meta.strides = graph::contiguous_strides(sizes);
  meta.dtype = graph::DType::Float64;
  return meta;
}

// Runs the joint graph of `forward` on `inputs` and random output
// gradients, and checks the input gradients against torch.autograd.grad.
void expect_grads_match_torch(const prims::PrimGraph& forward, const std::vector<PyRef>& inputs,
                              const std::vector<bool>& requires_grad) {
  JointGraph joint = build_joint_graph(forward, requires_grad);
  ASSERT_EQ(joint.graph.verify(), "");
  // Reference: the forward through torch, recording autograd.
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "torch", test::eval("torch").get());
  PyRef leaves = PyRef::steal(PyList_New(0));
  for (size_t i = 0; i < inputs.size(); ++i) {
    PyRef leaf = PyRef::steal(PyObject_CallMethod(inputs[i].get(), "detach", nullptr));
    PyRef flagged = PyRef::steal(PyObject_CallMethod(leaf.get(), "requires_grad_", "O",
                                                     requires_grad[i] ? Py_True : Py_False));
    PyList_Append(leaves.get(), flagged.get());
  }
  auto fwd = std::make_shared<prims::PrimGraph>(forward);
  runtime::PrimExecutor forward_run(fwd);
  std::vector<PyObject*> leaf_ptrs;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(leaves.get()); ++i) leaf_ptrs.push_back(PyList_GET_ITEM(leaves.get(), i));
  std::vector<PyObject*> outs(forward.outputs().size(), nullptr);
  ASSERT_TRUE(forward_run.run_values(leaf_ptrs.data(), outs.data())) << test::take_error();
  // Gradients flowing in, one per output that carries one.
  std::vector<PyObject*> joint_inputs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) joint_inputs[i] = inputs[i].get();
  PyRef ref_outs = PyRef::steal(PyList_New(0));
  PyRef ref_grads = PyRef::steal(PyList_New(0));
  std::vector<PyRef> grad_outs;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (joint.grad_inputs[k] < 0) continue;
    PyRef g = PyRef::steal(PyObject_CallMethod(test::eval("torch").get(), "randn_like", "O", outs[k]));
    grad_outs.push_back(g);
    joint_inputs.push_back(g.get());
    PyList_Append(ref_outs.get(), outs[k]);
    PyList_Append(ref_grads.get(), g.get());
  }
  PyRef wanted = PyRef::steal(PyList_New(0));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (requires_grad[i]) PyList_Append(wanted.get(), PyList_GET_ITEM(leaves.get(), i));
  }
  PyDict_SetItemString(ns.get(), "outs", ref_outs.get());
  PyDict_SetItemString(ns.get(), "grads", ref_grads.get());
  PyDict_SetItemString(ns.get(), "wanted", wanted.get());
  PyRef expected = PyRef::steal(PyRun_String(
      "torch.autograd.grad(outs, wanted, grads, allow_unused=True)", Py_eval_input, ns.get(), ns.get()));
  ASSERT_TRUE(expected) << test::take_error();
  for (PyObject* out : outs) Py_XDECREF(out);
  // kiln's joint graph.
  auto joint_graph = std::make_shared<prims::PrimGraph>(joint.graph);
  runtime::PrimExecutor joint_run(joint_graph);
  std::vector<PyObject*> joint_outs(joint.graph.outputs().size(), nullptr);
  ASSERT_TRUE(joint_run.run_values(joint_inputs.data(), joint_outs.data())) << test::take_error();
  size_t next_grad = joint.forward_outputs.size();
  size_t w = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!requires_grad[i]) continue;
    PyObject* want = PyTuple_GET_ITEM(expected.get(), w++);
    if (joint.input_grads[i] < 0) {
      EXPECT_EQ(want, Py_None) << "input " << i << ": kiln has no gradient, torch does";
      continue;
    }
    PyObject* got = joint_outs[next_grad++];
    PyDict_SetItemString(ns.get(), "got", got);
    PyDict_SetItemString(ns.get(), "want", want);
    PyRef same = PyRef::steal(PyRun_String(
        "want is not None and got.shape == want.shape and got.dtype == want.dtype and "
        "torch.allclose(got, want, rtol=1e-9, atol=1e-12)",
        Py_eval_input, ns.get(), ns.get()));
    ASSERT_TRUE(same) << test::take_error();
    EXPECT_EQ(same.get(), Py_True) << "input " << i << ": got " << test::str_of(got) << "\nwant "
                                   << test::str_of(want) << "\n" << prims::format_prim_graph(joint.graph);
  }
  for (PyObject* out : joint_outs) Py_XDECREF(out);
}

TEST(JointGraph, ElementwiseBroadcastAndReduction) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({3, 4}));
  const int w = g.add_input(f64({4}));
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(w));
  const int z = b.unary(Prim::Tanh, b.binary(Prim::Add, PrimArg::of_value(y), PrimArg::of_scalar(prims::Scalar::of_float(1))));
  const int s = b.reduce(Prim::Sum, z, {1}, false);
  g.set_outputs({s});
  expect_grads_match_torch(g, {test::eval("torch.randn(3, 4, dtype=torch.float64)"),
                               test::eval("torch.randn(4, dtype=torch.float64)")},
                           {true, true});
}

TEST(JointGraph, SoftmaxLikeChainWithAmaxAndViews) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({2, 3, 4}));
  const int m = b.reduce(Prim::Amax, x, {-1}, true);
  const int e = b.unary(Prim::Exp, b.binary(Prim::Sub, PrimArg::of_value(x), PrimArg::of_value(m)));
  const int d = b.binary(Prim::Div, PrimArg::of_value(e), PrimArg::of_value(b.reduce(Prim::Sum, e, {-1}, true)));
  const int v = b.permute(b.view(d, {6, 4}), {1, 0});
  auto [var, mean] = b.var_mean(v, {1}, 1, false);
  g.set_outputs({var, mean});
  expect_grads_match_torch(g, {test::eval("torch.randn(2, 3, 4, dtype=torch.float64)")}, {true});
}

TEST(JointGraph, InputsWithoutGradAndUnusedInputs) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({3}));
  const int c = g.add_input(f64({3}));
  g.add_input(f64({3}));  // unused
  const int y = b.binary(Prim::Mul, PrimArg::of_value(x), PrimArg::of_value(c));
  g.set_outputs({y});
  JointGraph joint = build_joint_graph(g, {true, false, true});
  EXPECT_GE(joint.input_grads[0], 0);
  EXPECT_EQ(joint.input_grads[1], -1);
  EXPECT_EQ(joint.input_grads[2], -1);
  expect_grads_match_torch(g, {test::eval("torch.randn(3, dtype=torch.float64)"),
                               test::eval("torch.randn(3, dtype=torch.float64)"),
                               test::eval("torch.randn(3, dtype=torch.float64)")},
                           {true, false, true});
}

TEST(JointGraph, NoRuleThrowsNoDerivative) {
  prims::PrimGraph g;
  prims::PrimBuilder b(g);
  const int x = g.add_input(f64({3, 2}));
  const int p = b.reduce(Prim::Prod, x, {0}, false);
  g.set_outputs({p});
  EXPECT_THROW(build_joint_graph(g, {true}), NoDerivative);
}

}  // namespace
}  // namespace kiln::autograd
