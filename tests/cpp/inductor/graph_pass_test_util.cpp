#include "tests/cpp/inductor/graph_pass_test_util.h"

#include <Python.h>
#include <gtest/gtest.h>

#include <memory>

#include "runtime/prim_executor.h"
#include "tests/cpp/runtime/python_test_util.h"

namespace kiln::test {

graph::TensorMeta tensor_meta(std::vector<int64_t> sizes, graph::DType dtype, std::vector<int64_t> strides) {
  graph::TensorMeta m;
  m.strides = strides.empty() ? graph::contiguous_strides(sizes) : std::move(strides);
  m.sizes = std::move(sizes);
  m.dtype = dtype;
  return m;
}

int count_prims(const prims::PrimGraph& graph, prims::Prim prim) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node.prim == prim;
  return n;
}

void expect_same_results(const prims::PrimGraph& before, const prims::PrimGraph& after,
                         const std::vector<std::string>& inputs, bool exact) {
  ASSERT_EQ(before.outputs().size(), after.outputs().size());
  for (size_t i = 0; i < before.outputs().size(); ++i) {
    EXPECT_EQ(after.value(after.outputs()[i]).meta, before.value(before.outputs()[i]).meta) << "output " << i;
  }
  std::vector<PyRef> values;
  std::vector<PyObject*> args;
  for (const std::string& input : inputs) {
    values.push_back(eval(input));
    ASSERT_TRUE(values.back()) << take_error();
    args.push_back(values.back().get());
  }
  runtime::PrimExecutor want_run(std::make_shared<prims::PrimGraph>(before));
  runtime::PrimExecutor got_run(std::make_shared<prims::PrimGraph>(after));
  PyRef want = PyRef::steal(want_run.run(args.data()));
  PyRef got = PyRef::steal(got_run.run(args.data()));
  ASSERT_TRUE(want && got) << take_error();
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "torch", eval("torch").get());
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(want.get()); ++i) {
    PyDict_SetItemString(ns.get(), "a", PyTuple_GET_ITEM(got.get(), i));
    PyDict_SetItemString(ns.get(), "e", PyTuple_GET_ITEM(want.get(), i));
    const char* check = exact ? "torch.equal(a, e)" : "torch.allclose(a, e, rtol=1e-5, atol=1e-4)";
    PyRef same = PyRef::steal(PyRun_String(check, Py_eval_input, ns.get(), ns.get()));
    ASSERT_TRUE(same) << take_error();
    EXPECT_EQ(same.get(), Py_True) << "output " << i;
  }
}

}  // namespace kiln::test
