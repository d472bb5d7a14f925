// The autograd tests' harness: builds a forward prim graph over live float64
// tensors, runs its joint graph through the prim executor, and compares the
// input gradients with torch.autograd.grad over the same forward run through
// torch with inputs that require grad.
#pragma once

#include <Python.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "autograd/joint_graph.h"
#include "prims/prim_builder.h"
#include "runtime/prim_executor.h"
#include "tests/cpp/runtime/python_test_util.h"
#include "tests/cpp/test_metas.h"

namespace kiln::autograd::test {

using kiln::test::PyRef;

using kiln::test::f64;

// The metadata of a live CPU tensor (sizes, strides, dtype).
inline graph::TensorMeta meta_of(PyObject* tensor) {
  graph::TensorMeta meta;
  PyRef shape = PyRef::steal(PyObject_CallMethod(tensor, "size", nullptr));
  PyRef strides = PyRef::steal(PyObject_CallMethod(tensor, "stride", nullptr));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape.get()); ++i) {
    meta.sizes.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), i)));
    meta.strides.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(strides.get(), i)));
  }
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(tensor, "dtype"));
  meta.dtype = graph::dtype_from_name(kiln::test::str_of(dtype.get()));
  return meta;
}

// Puts the repository's python/ folder on sys.path so that kiln's Python
// helpers (kiln._extern_vjp) import in the test binary.
inline void make_kiln_importable() {
  const std::string dir = kiln::test::repr_of(kiln::test::py_str(KILN_PYTHON_PACKAGE_DIR).get());
  kiln::test::exec_module("import sys\nif " + dir + " not in sys.path: sys.path.insert(0, " + dir + ")\n");
}

// Runs the joint graph of `forward` on `inputs` and random output
// gradients, and checks the input gradients against torch.autograd.grad.
// kiln having no gradient for an input matches torch's None or all zeros
// (bernoulli's p: torch's zeros, kiln's no path).
inline void expect_grads_match_torch(const prims::PrimGraph& forward, const std::vector<PyRef>& inputs,
                                     const std::vector<bool>& requires_grad) {
  JointGraph joint = build_joint_graph(forward, requires_grad);
  ASSERT_EQ(joint.graph.verify(), "");
  // Reference: the forward through torch, recording autograd.
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "__builtins__", PyEval_GetBuiltins());
  PyDict_SetItemString(ns.get(), "torch", kiln::test::eval("torch").get());
  PyRef leaves = PyRef::steal(PyList_New(0));
  for (size_t i = 0; i < inputs.size(); ++i) {
    PyRef leaf = PyRef::steal(PyObject_CallMethod(inputs[i].get(), "detach", nullptr));
    PyRef flagged = PyRef::steal(PyObject_CallMethod(leaf.get(), "requires_grad_", "O",
                                                     requires_grad[i] ? Py_True : Py_False));
    PyList_Append(leaves.get(), flagged.get());
  }
  PyDict_SetItemString(ns.get(), "leaves", leaves.get());
  auto fwd = std::make_shared<prims::PrimGraph>(forward);
  runtime::PrimExecutor forward_run(fwd);
  std::vector<PyObject*> leaf_ptrs;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(leaves.get()); ++i) leaf_ptrs.push_back(PyList_GET_ITEM(leaves.get(), i));
  std::vector<PyObject*> outs(forward.outputs().size(), nullptr);
  ASSERT_TRUE(forward_run.run_values(leaf_ptrs.data(), outs.data())) << kiln::test::take_error();
  // Gradients flowing in, one per output that carries one.
  std::vector<PyObject*> joint_inputs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) joint_inputs[i] = inputs[i].get();
  PyRef ref_outs = PyRef::steal(PyList_New(0));
  PyRef ref_grads = PyRef::steal(PyList_New(0));
  std::vector<PyRef> grad_outs;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (joint.grad_inputs[k] < 0) {
      // kiln sees no gradient path to this output: torch must see none
      // either (an extern's output meta without requires_grad cuts it).
      PyDict_SetItemString(ns.get(), "out", outs[k]);
      PyRef cut = PyRef::steal(PyRun_String(
          "not out.requires_grad or all(g is None or not bool(g.any()) for g in torch.autograd.grad("
          "out, [t for t in leaves if t.requires_grad], torch.randn_like(out), allow_unused=True, "
          "retain_graph=True))",
          Py_eval_input, ns.get(), ns.get()));
      ASSERT_TRUE(cut) << kiln::test::take_error();
      EXPECT_EQ(cut.get(), Py_True) << "output " << k << ": kiln has no gradient path to it, torch has one";
      continue;
    }
    PyRef g = PyRef::steal(PyObject_CallMethod(kiln::test::eval("torch").get(), "randn_like", "O", outs[k]));
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
      "torch.autograd.grad(outs, wanted, grads, allow_unused=True) if outs else (None,) * len(wanted)",
      Py_eval_input, ns.get(), ns.get()));
  for (PyObject* out : outs) Py_XDECREF(out);
  ASSERT_TRUE(expected) << kiln::test::take_error();
  // kiln's joint graph.
  auto joint_graph = std::make_shared<prims::PrimGraph>(joint.graph);
  runtime::PrimExecutor joint_run(joint_graph);
  std::vector<PyObject*> joint_outs(joint.graph.outputs().size(), nullptr);
  ASSERT_TRUE(joint_run.run_values(joint_inputs.data(), joint_outs.data()))
      << kiln::test::take_error() << "\n" << prims::format_prim_graph(joint.graph);
  size_t next_grad = joint.forward_outputs.size();
  size_t w = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!requires_grad[i]) continue;
    PyObject* want = PyTuple_GET_ITEM(expected.get(), w++);
    PyDict_SetItemString(ns.get(), "want", want);
    if (joint.input_grads[i] < 0) {
      PyRef zero = PyRef::steal(PyRun_String("want is None or not bool(want.any())", Py_eval_input,
                                             ns.get(), ns.get()));
      EXPECT_EQ(zero.get(), Py_True) << "input " << i << ": kiln has no gradient, torch has "
                                     << kiln::test::str_of(want);
      continue;
    }
    PyObject* got = joint_outs[next_grad++];
    PyDict_SetItemString(ns.get(), "got", got);
    // torch's None means zeros (an output not depending on the input).
    PyRef same = PyRef::steal(PyRun_String(
        "(lambda w: got.shape == w.shape and got.dtype == w.dtype and torch.allclose("
        "got, w, rtol=1e-9, atol=1e-12, equal_nan=True))(torch.zeros_like(got) if want is None else want)",
        Py_eval_input, ns.get(), ns.get()));
    ASSERT_TRUE(same) << kiln::test::take_error();
    EXPECT_EQ(same.get(), Py_True) << "input " << i << ": got " << kiln::test::str_of(got) << "\nwant "
                                   << kiln::test::str_of(want) << "\n" << prims::format_prim_graph(joint.graph);
  }
  for (PyObject* out : joint_outs) Py_XDECREF(out);
}

// A forward graph under construction over live inputs, checked with
// expect_grads_match_torch.
struct GradCase {
  prims::PrimGraph graph;
  prims::PrimBuilder b{graph, graph::DType::Float64};
  std::vector<PyRef> inputs;
  std::vector<bool> requires_grad;

  // Adds the tensor `expression` evaluates to as an input; returns its id.
  int input(const std::string& expression, bool grad = true) {
    PyRef tensor = kiln::test::eval(expression);
    inputs.push_back(tensor);
    requires_grad.push_back(grad);
    return graph.add_input(meta_of(tensor.get()));
  }
  // Sets the outputs and compares the gradients with torch's.
  void check(std::vector<int> outputs) {
    graph.set_outputs(std::move(outputs));
    expect_grads_match_torch(graph, inputs, requires_grad);
  }
};

}  // namespace kiln::autograd::test
